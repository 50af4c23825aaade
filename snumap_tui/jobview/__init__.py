"""`snumap top --job`: a running job's nodes as streams of frames.

- ``wire``: the line format a node's sampler writes to stdout and the aggregator reads (pure);
- ``node``: the node's streaming sampler (``snumap top --stream``), run by srun on every node;
- ``aggregate``: the login node's aggregator, a pure function of the frames of N streams;
- ``launch``: srun as the transport (argv, the reader threads, ending every sampler).

Headless: the view is ui/job_view.py, the findings analysis/jobfindings.py.
"""
