"""Run by Extra-P's own interpreter (setup.sh test makes .venv-extrap): model an Extra-P text
file as `extrap --text FILE --measure M --options KEY=VALUE...` does, and print per call path
of metric `time` the chosen hypothesis as JSON: [[numerator, denominator, log exponent], ...]
(an empty list: the constant), and its formula.

    .venv-extrap/bin/python tests/extrap_oracle.py FILE MEASURE [KEY=VALUE ...]
"""

import json
import sys
from fractions import Fraction

from extrap.entities.measurement import Measure
from extrap.fileio.file_reader.text_file_reader import TextFileReader
from extrap.modelers.model_generator import ModelGenerator


def main() -> None:
    path, measure, *options = sys.argv[1:]
    experiment = TextFileReader().read_experiment(path)
    gen = ModelGenerator(experiment, modeler="default", use_measure=Measure[measure.upper()])
    for opt in options:
        key, value = opt.split("=", 1)
        setattr(gen.modeler, key, value == "True" if value in ("True", "False") else value)
    gen.model_all()
    out = {}
    for (callpath, metric), model in gen.models.items():
        if str(metric) != "time":
            continue
        terms = []
        for ct in model.hypothesis.function.compound_terms:
            poly, log = Fraction(0), 0
            for st in ct.simple_terms:
                if st.term_type == "polynomial":
                    poly = Fraction(st.exponent).limit_denominator(12)
                else:
                    log = int(st.exponent)
            terms.append([poly.numerator, poly.denominator, log])
        out[str(callpath)] = {"terms": terms, "formula": str(model.hypothesis.function)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
