"""A live protocol fuzzer for a broker on this machine: a development tool that serving code never imports.

Theory of operation: the engine, its seeds and mutations, the well-behaved pair and the campaign are in
`seeds` (tools/fuzz.py is its command line).
"""
