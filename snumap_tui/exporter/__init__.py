"""`snumap exporter`: the sampler's counters for Prometheus (and node_exporter's textfile).

Another consumer of the Sampler, beside the views: ``totals`` and ``jobs`` add up the interval
counters of the model, ``collector`` lays them out as Prometheus families, ``server`` serves
them, ``promql`` writes the catalogue's formulas as recording rules. Headless: no textual,
no rich.
"""
