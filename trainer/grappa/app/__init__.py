"""The application: what users and pods call. The command line (`cli.py`: `python -m grappa
prepare | train | single | predict | evaluate | aggregator | worker`), each process role's wiring
(`roles.py`: metrics, the job's status, the strategy's loops), the run directory's rules for
reruns (`rerun.py`), the report and plot (`report.py`) and the Prometheus metrics (`metrics.py`).

May import every other room; nothing imports it.
"""
