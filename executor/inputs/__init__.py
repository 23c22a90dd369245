"""Where updates come from: files, frames and tables checked against an input's schema;
keyed and strict inputs; CDC envelopes; batches that arrive.
"""
