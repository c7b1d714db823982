"""Operator tools' exports: the state timeline as a Chrome trace / Perfetto file."""
