"""Job entry points for RQ workers and the clock: thin, they open the database and call `oar`."""
