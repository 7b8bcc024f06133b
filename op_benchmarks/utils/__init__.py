"""The benchmark harness shared by every bench_<op>.py."""
