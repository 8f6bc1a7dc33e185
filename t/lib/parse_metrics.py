#!/usr/bin/python3
"""Parses a Prometheus text exposition on stdin with prometheus_client's own parser (Debian's
python3-prometheus-client, hence /usr/bin/python3) and prints it as JSON for the Perl tests:
{"families": {name: {"type", "help"}}, "samples": [[name, {label: value}, value]]}.
A text the parser rejects exits 1 with its error."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families


def main():
    text = sys.stdin.read()
    families, samples = {}, []
    try:
        for family in text_string_to_metric_families(text):
            families[family.name] = {"type": family.type, "help": family.documentation}
            for s in family.samples:
                samples.append([s.name, dict(s.labels), s.value])
    except Exception as e:  # the parser's errors are plain ValueErrors and the like
        print("parse error: %s" % e, file=sys.stderr)
        return 1
    json.dump({"families": families, "samples": samples}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
