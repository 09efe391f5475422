"""The bad-input tables: for every registered action, calls that must be refused and change nothing.

`world` builds the sessions, messages and tasks the cases point at; `sessions`, `schedules`,
`subscriptions`, `questions` and `outside` hold the tables of their actions; `registry` gathers
them so that a test can fail when an action of `oar.actions.catalog.load_actions()` has no
cases; `in_process` runs a case through the relay's own app and dispatcher, checked with the
database's write counts, in a world kept while nothing writes.
"""
