"""pytest plugin (entry point `kafkacompat`): fixtures that run a real kafkacompat broker.

Fixtures are added as the broker grows; the module is registered as a pytest11 plugin so that projects
which depend on kafkacompat get them without a conftest.
"""
