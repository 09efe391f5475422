"""Every limit and time constant of the relay, each with the line that says what it is.

Time constants can be overridden from the environment as ``OAR_<NAME>`` (see
``oar.core.config``), so that tests and demos can run them fast; the values here are the
documented defaults (docs/limits.md).
"""

# Longest wait per tool call (owner setting `max_wait_seconds`, 120–3600).
MAX_WAIT_SECONDS = 600
MAX_WAIT_SECONDS_RANGE = (120, 3600)
# Longest wait of an MCP tool call that gave no progressToken: below the 60 s after which
# common MCP clients cut a call; the answer then says `running` and to call `wait`.
MCP_MAX_WAIT_SECONDS = 50
# MCP tasks (docs/mcp.md#tasks): a task is kept this long after it was made, then deleted; its
# runner renews a lease this often (a task whose lease ran out lost its web process); clients are
# told to poll this often.
MCP_TASK_TTL_SECONDS = 24 * 3600
MCP_TASK_LEASE_SECONDS = 30
MCP_TASK_POLL_MS = 1000
# `wait_seconds` when a call does not give one.
DEFAULT_WAIT_SECONDS = 120
# A caller's own turn may last this long (owner setting `max_turn_seconds`).
MAX_TURN_SECONDS = 3600
# Task health: minutes without output before a task counts as quiet (owner setting).
QUIET_AFTER_MINUTES = 10
# A session that answered but keeps working in the background reports `done` after this
# long without output from its tasks (docs/waiting.md, docs/limits.md).
BACKGROUND_QUIET_SECONDS = 10

# Sessions started by one conversation with a turn queued or running, per relay.
MAX_ACTIVE_SESSIONS = 4
# Agent-to-agent prompts a conversation may send before an approval card.
LOOP_PROMPTS_BEFORE_CARD = 30
# Relays a prompt may cross (docs/relays.md, docs/limits.md); the owner's mention lets it cross one more.
MAX_HOPS = 2
# Paired relays (docs/relays.md#the-link): connecting to a peer, reading its answer beyond the wait a
# call asked for, and connection attempts after the first (a connection never made sent nothing,
# so trying again cannot do a call twice).
PEER_CONNECT_TIMEOUT_SECONDS = 5
PEER_READ_MARGIN_SECONDS = 30
PEER_CONNECT_RETRIES = 2
# list_relays asks each paired relay whether it answers, this long at most.
PEER_PING_TIMEOUT_SECONDS = 3
# An ask kept on a paired relay: how often this relay checks there for its answer, and how often
# while the paired relay does not answer (docs/relays.md#asks-across-relays).
PEER_ASK_POLL_SECONDS = 5
PEER_ASK_RETRY_SECONDS = 30
# Events across relays (docs/relays.md#events-across-relays): how often this relay fetches a paired
# relay's events for its conversations' subscriptions there; how long without an answer before
# the `link_lost` line; how many deliveries, and for how long, a relay keeps for another to fetch.
PEER_EVENTS_POLL_SECONDS = 3
PEER_LINK_LOST_SECONDS = 60
PEER_OUTBOX_KEEP = 500
PEER_OUTBOX_KEEP_SECONDS = 7 * 24 * 3600
# The longest a paired relay's answer may be (a bigger one is refused as garbage).
PEER_MAX_ANSWER_BYTES = 2 * 1024 * 1024
# An approval card nobody decided is withdrawn after this long (docs/rules.md#outcomes, docs/limits.md: 8 hours).
CARD_EXPIRY_SECONDS = 8 * 3600
# A call waiting on a card with no turn renews its lease within this long; the clock's sweep takes a card
# whose lease ran out for one whose caller went away (its process died).
CARD_WAITER_LEASE_SECONDS = 30
# Calls and write calls per sliding minute per conversation (owner settings; 0 = no limit).
RATE_CALLS_PER_MINUTE = 60
RATE_WRITES_PER_MINUTE = 10
RATE_WINDOW_SECONDS = 60
# Calls of one conversation waiting at once (a wait holds a web thread; docs/limits.md#waits-at-once),
# across the relay's web processes; 0 = no cap. Read from OAR_MAX_WAITS_PER_CONVERSATION.
MAX_WAITS_PER_CONVERSATION = 4
# A waiting call renews its slot within this long; a process killed mid-wait leaves slots that lapse after it.
WAIT_SLOT_LEASE_SECONDS = 30
# A web thread reads a request's head (request line and headers) within this long of taking the
# connection, and its body within this long after the head; past either the request is answered 408
# and its connection closed, so clients that send slowly cannot hold the threads (docs/operations.md#slow-clients).
REQUEST_HEAD_TIMEOUT_SECONDS = 10
REQUEST_BODY_TIMEOUT_SECONDS = 30

# Prompt and reply sizes (docs/waiting.md#statuses).
MAX_PROMPT_CHARS = 100_000
MAX_REPLY_CHARS = 8_000
# Text of a running reply shown in `progress`.
PROGRESS_TEXT_CHARS = 600
PROGRESS_ACTIVITIES = 5
TURN_ACTIVITIES_KEPT = 20  # a turn's last activity lines (tool calls) kept on its prompt, for its progress and announces

# Lists.
LIST_SESSIONS_DEFAULT = 20
LIST_SESSIONS_MAX = 100
READ_SESSION_LAST_DEFAULT = 10
READ_SESSION_LAST_MAX = 50
READ_SESSION_MAX_CHARS_DEFAULT = 12_000
READ_SESSION_MAX_CHARS_RANGE = (500, 50_000)
GROUPS_IN_RELAY_INFO = 50
GROUPS_IN_ERROR = 20
GROUP_MEMBERS_IN_READ = 50
IGNORED_ARGUMENTS_LISTED = 20
RECENT_SESSION_DAYS = 7
RECENT_CWDS = 10

# Turn execution.
# A running turn writes a heartbeat this often; the reconciler fails a turn whose
# heartbeat is older than TURN_STALE_SECONDS (its worker died).
TURN_HEARTBEAT_SECONDS = 5
TURN_STALE_SECONDS = 30
# The clock runs the reconciler this often; its due-time timer sleeps at most this long.
RECONCILE_SECONDS = 5
# Partial reply text is written to the database at most this often while streaming: four
# writes a second per turn whatever the token rate (docs/benchmarks.md#provider-streaming-python--m-bench-providers).
PARTIAL_WRITE_SECONDS = 0.25
# A turn checks the database for a stop request this often when Redis is unreachable.
STOP_POLL_SECONDS = 1.0
# A waiting call re-reads the database this often in case a wake-up signal was lost
# (Redis restarted); wake-ups themselves arrive by signal within milliseconds.
WAIT_RECHECK_SECONDS = 5

# Readiness (docs/operations.md#health-check): every worker process and clock says it is there
# this often, and /readyz counts one that said so within ALIVE_STALE_SECONDS.
ALIVE_SECONDS = 5
ALIVE_STALE_SECONDS = 20
# A web process answers /healthz from its last healthy answer for this long: a probe storm costs
# what a bare endpoint does, and a failing part shows within this long (a failure is never reused).
HEALTH_REUSE_SECONDS = 1

# Ids and tokens.
SESSION_ID_BYTES = 8  # 64 bits, hex: shown shortened to 8 characters
TOKEN_BYTES = 32  # 256 bits
SHORT_ID_CHARS = 8

# Signing in to the owner's page (docs/owner-api.md#signing-in).
# A sign-in ends this long after the browser's last visit (checked on the server).
SIGN_IN_LIFETIME_SECONDS = 14 * 86400
# A sign-in's last visit is written at most this often (the page polls every second).
SIGN_IN_SEEN_EVERY_SECONDS = 60
# Wrong owner tokens one client address may send in the window; then sign-in waits.
SIGN_IN_FAILURES_ALLOWED = 5
SIGN_IN_FAILURE_WINDOW_SECONDS = 300
# OAR_HOST values that listen on every address: such a relay has no one address of its own, so a
# conversation's token page fills in the address it was opened at (docs/owner-api.md#agent-tokens-on-the-page).
EVERY_ADDRESS_HOSTS = ("0.0.0.0", "::", "[::]")

# Schedules (docs/schedules.md).
# Active schedules firing into one conversation, and set by one conversation for others.
SCHEDULES_INTO_CONVERSATION = 20
SCHEDULES_SET_FOR_OTHERS = 20
# The longest `every_minutes`: a year.
SCHEDULE_EVERY_MINUTES_MAX = 525_600
# A held firing (loop protection used up) is checked again this often.
SCHEDULE_HOLD_RECHECK_SECONDS = 60
# Ended schedules stay in list_schedules this long.
SCHEDULE_ENDED_LISTED_SECONDS = 3600
# The length of the minute in `every_minutes`. 60 by contract; tests and demos shorten it
# to watch a grid of several firings pass in seconds.
SCHEDULE_MINUTE_SECONDS = 60
# The first characters of a schedule's text that list_schedules shows.
SCHEDULE_TEXT_LISTED_CHARS = 200
# Due schedules one sweep of the clock fires at most (the rest wait for the next sweep).
SCHEDULE_SWEEP_BATCH = 500

# Background tasks (docs/tasks.md#read_task_output, docs/limits.md).
# A running task's job writes a heartbeat this often; the reconciler fails a task whose
# heartbeat is older than TASK_STALE_SECONDS (its worker died) and ends its process.
TASK_HEARTBEAT_SECONDS = 5
TASK_STALE_SECONDS = 30
# A stopped task's process group gets SIGTERM, then SIGKILL after this long.
TASK_KILL_GRACE_SECONDS = 5
# A task's output stays readable this long after it ends; then its file is removed.
TASK_OUTPUT_KEEP_SECONDS = 3600
# On PostgreSQL a running task's new output is copied into the database this often, where
# every node reads it (docs/tasks.md#where-the-output-is-kept).
TASK_OUTPUT_COPY_SECONDS = 1.0
# Relay-run tasks running at once (docs/tasks.md#how-many-and-how-long): per session (owner setting
# `max_running_tasks_per_session`) and on the whole relay (`max_running_tasks`); one more is refused.
MAX_RUNNING_TASKS_PER_SESSION = 4
MAX_RUNNING_TASKS_PER_SESSION_RANGE = (1, 100)
MAX_RUNNING_TASKS = 16
MAX_RUNNING_TASKS_RANGE = (1, 200)
# A task running longer is ended and failed (owner setting `max_task_minutes`, 1 minute to 7 days).
MAX_TASK_MINUTES = 60
MAX_TASK_MINUTES_RANGE = (1, 10_080)
# The length of a minute in `max_task_minutes` (60 by contract; shorten only for tests and demos).
TASK_MINUTE_SECONDS = 60
# read_task_output `lines`.
TASK_OUTPUT_LINES_DEFAULT = 50
TASK_OUTPUT_LINES_MAX = 500

# Watching sessions (docs/events.md, docs/limits.md).
# Events within this long of the first one after a quiet period arrive as one message.
DELIVERY_WINDOW_SECONDS = 30
# Wake-ups per watcher are counted over this sliding span (an hour); past 20 the rest come
# as a digest every DELIVERY_CAP_DIGEST_SECONDS.
DELIVERY_CAP_HOUR_SECONDS = 3600
DELIVERY_CAP_DIGEST_SECONDS = 600
# The length of the minute in digest_minutes, stalled_minutes and heartbeat_minutes (60 by
# contract; tests shorten it).
DELIVERY_MINUTE_SECONDS = 60
# `stalled_minutes` of a subscription that does not give one: a running turn or task without
# output this long is `stalled` (docs/events.md#subscriptions, docs/limits.md).
STALLED_DEFAULT_MINUTES = 15
# Events × subscriptions one ingestion transaction looks at, at most, so that a wide fan-out
# keeps write transactions short; it writes one held row per watcher and batch, not per
# event (docs/events.md#how-events-are-held).
INGEST_ROWS_PER_BATCH = 200_000
# A delivery message lists at most this many event lines (urgent events and the engine's own
# lines always), then one line counting the rest by kind: "a short message" (docs/events.md#a-short-message).
DELIVERY_LINES_SHOWN = 100
# One relay process delivers due events at a time; its lease on that (renewed after each
# delivery) lapses this long after the process stopped without giving it back.
DELIVERY_LOCK_SECONDS = 30
# On SQLite, ingestion gives the write lock up this long between two batches (besides reading and
# matching the next one without it), so that other writers waiting for it (deliveries, turns,
# requests) get their turn: the relay's writers try it every millisecond (docs/decisions.md#write-lock-queue).
INGEST_PAUSE_SECONDS = 0.02
# Ended subscriptions stay in list_subscriptions this long.
SUBSCRIPTION_ENDED_LISTED_SECONDS = 3600
# The longest one subscription's /regex/ `match` may run on one event's line: a pattern that
# backtracks longer (`/(a+)+b/` on a line of a's) counts as not matching, rather than holding up
# the matching of every subscription's events for as long as it runs.
SUBSCRIPTION_MATCH_SECONDS = 0.1
# Pruning what the delivery engine no longer needs (docs/limits.md#retention): the clock
# prunes this often, PRUNE_BATCH rows per write transaction (tens of milliseconds) with
# PRUNE_PAUSE_SECONDS between them. Held rows stay HELD_KEEP_SECONDS after their
# delivery (or drop); events EVENT_KEEP_SECONDS after they happened (a peer's replay after a lost link reaches 7 days back, docs/relays.md).
PRUNE_EVERY_SECONDS = 300
PRUNE_BATCH = 2000
PRUNE_PAUSE_SECONDS = 0.05
HELD_KEEP_SECONDS = 3600
EVENT_KEEP_SECONDS = 7 * 86400

# Providers that speak an LLM wire protocol (docs/providers.md#wire-protocols).
# Connecting to a provider's server, before the request counts as failed (network).
PROVIDER_CONNECT_TIMEOUT_SECONDS = 10
# Silence between two bytes of a provider's answer before the turn fails (timeout);
# keep-alive comments count as bytes, so a slow model that keeps its stream alive is waited on.
PROVIDER_READ_TIMEOUT_SECONDS = 120

# The database (docs/errors.md, docs/operations.md).
# The clock copies SQLite's WAL back into the database this often (oar.core.db.checkpoint).
SQLITE_CHECKPOINT_SECONDS = 1
SQLITE_BUSY_SECONDS = 30  # how long an SQLite writer waits for another's lock before giving up
DATABASE_BUSY_RETRY_SECONDS = 5  # Retry-After of a call that found the database busy (503)

# Team runs (docs/team-runs.md#limits).
TEAM_TEXT_MAX_CHARS = 100_000  # a message, a task description, an artifact, a summary, a saved state
TEAM_MEMORY_MAX_CHARS = 200_000  # one memory file after a write or an append
TEAM_THOUGHT_MAX_CHARS = 2_000  # one broadcast_thinking
TEAM_THOUGHTS_KEPT = 50  # the newest thoughts of a run that an opened page can still show (Redis only)
TEAM_THOUGHTS_KEEP_SECONDS = 3600  # how long Redis keeps a run's recent thoughts after the last one
TEAM_MESSAGES_RETURNED = 500  # get_messages answers at most this many, the newest
TEAM_WORK_ITEMS_PER_RUN = 1_000  # tasks on one run's board
TEAM_DEPENDENCIES_MAX = 50  # depends_on entries of one task
TEAM_DERIVED_PER_PARENT = 3  # the circuit breaker: derived tasks of one parent
TEAM_DERIVED_DEPTH = 1  # the circuit breaker: how deep derived tasks may nest
TEAM_AGENT_FILE_MAX_BYTES = 1_000_000  # a team or pool YAML file the relay reads
TEAM_THOUGHTS_POLL_MS = 400  # how often an open run view asks for new thoughts (under a second)
TEAM_CALLS_PER_MINUTE = 600  # team tool calls per sliding minute per conversation (owner setting; its own budget)
TEAM_WRITES_PER_MINUTE = 120  # …of which writes (owner setting `team_writes_per_minute`)
TEAM_RUNS_PER_CONVERSATION_PER_DAY = 20  # team runs one conversation starts (creates) per UTC day
TEAM_MESSAGES_PER_RUN = 10_000  # messages one run keeps
TEAM_ARTIFACTS_PER_RUN = 500  # artifact names of one run (posting a name again replaces it)
TEAM_REVIEWS_PER_RUN = 2_000  # reviews requested in one run
TEAM_AGENTS_PER_RUN = 100  # agent ids one run binds to conversations
TEAM_RUN_TEXT_MAX_CHARS = 20_000_000  # agents' text one run stores: messages, tasks, artifacts, reviews, summary, state
TEAM_MEMORY_FILES_PER_TEAM = 100  # memory files one team keeps (the owner's imports count for nobody)
TEAM_TREE_MAX_DEPTH = 64  # how far up a conversation's starters are followed to find its team
# Which sessions an agent's conversation sees and reaches, on every agent surface (owner setting
# sessions_visibility, docs/rules.md#visibility): all of them by default.
SESSIONS_VISIBILITIES = ("self", "tree", "agent", "all")
SESSIONS_VISIBILITY = "all"
# How deep `tree` follows sessions started by sessions started by the conversation.
VISIBILITY_TREE_DEPTH = 4
# OpenClaw's session tools (docs/openclaw.md).
# sessions_send's wait when timeoutSeconds is not given.
OPENCLAW_SEND_TIMEOUT_SECONDS = 30
# The reply ping-pong's turns after a sessions_send (owner setting max_ping_pong_turns, 0 to 5).
OPENCLAW_MAX_PING_PONG_TURNS = 5
OPENCLAW_MAX_PING_PONG_RANGE = (0, 5)
# A kept `run` child of sessions_spawn is archived this long after its announce
# (owner setting spawn_archive_after_minutes).
OPENCLAW_ARCHIVE_AFTER_MINUTES = 60
# sessions_list's rows when limit is not given, and at most.
OPENCLAW_LIST_DEFAULT = 50
OPENCLAW_LIST_MAX = 200
# sessions_history's records when limit is not given, and at most (read_session's own bound).
OPENCLAW_HISTORY_DEFAULT = 20
# sessions_spawn's runTimeoutSeconds at most (a day); none given: the turn's own limit applies.
OPENCLAW_RUN_TIMEOUT_MAX_SECONDS = 86_400
# Notifications to the owner (docs/notifications.md). Notifications of one kind for one session
# within NOTIFY_MERGE_SECONDS of the last one sent are merged into one; a failed send is tried
# again after NOTIFY_RETRY_SECONDS, then 4 times longer each time, NOTIFY_ATTEMPTS times in all;
# a sender's claim on a row lapses after NOTIFY_SEND_LEASE_SECONDS (a sender that died mid-send).
NOTIFY_MERGE_SECONDS = 60
NOTIFY_RETRY_SECONDS = 15
NOTIFY_ATTEMPTS = 5
NOTIFY_SEND_LEASE_SECONDS = 60
# How long one send to a notification URL may take (connect and read, each).
NOTIFY_SEND_TIMEOUT_SECONDS = 10
# The open page shows the browser notifications sent this recently (a page opened later shows none).
NOTIFY_PAGE_RECENT_SECONDS = 120
# Agent-written text a notification carries, at most (a card's or question's start, a reply's).
NOTIFY_EXCERPT_CHARS = 140
# Notification channels the owner may configure.
NOTIFY_MAX_CHANNELS = 20
# Sent, dropped and failed outbox rows are kept this long (the Settings page shows the last ones).
NOTIFY_KEEP_SECONDS = 7 * 86400
# Browsers may keep the relay's /favicon.ico this long before asking again (a day).
FAVICON_MAX_AGE_SECONDS = 86_400
# Deciding from a notification (docs/notifications.md#deciding-from-a-notification). A decision
# link's token is DECISION_TOKEN_BYTES random bytes (stored as its SHA-256 hash) and lives as long
# as its card, and at most DECISION_LINK_MAX_SECONDS (questions have no expiry of their own).
DECISION_TOKEN_BYTES = 24
DECISION_LINK_MAX_SECONDS = 24 * 3600
# Decision links one notification lists (a merged one announces several cards or questions).
DECISION_LINKS_PER_NOTIFICATION = 5
# A question's options a Web Push notification offers as actions, at most (the browser shows
# what its platform allows, `Notification.maxActions`); ntfy shows at most 3 buttons.
DECISION_PUSH_OPTIONS = 4
DECISION_NTFY_BUTTONS = 3
# Requests to the decision endpoints (the page and the actions' POST) per client address within
# DECISION_REQUEST_WINDOW_SECONDS; past it they answer 429 and look at nothing.
DECISION_REQUESTS_PER_WINDOW = 30
DECISION_REQUEST_WINDOW_SECONDS = 60
# What may be decided from a notification (the `notify_decide_kinds` setting): questions, and
# approval cards by their reasons (a card with several reasons needs every one of them listed).
# Moving subscriptions to another conversation is left to the Inbox unless the owner adds it.
NOTIFY_DECIDE_KINDS = (
    "questions", "loop", "mode", "create_sessions", "watch_sessions", "change_other_sessions",
    "end_other_sessions", "transfer",
)
NOTIFY_DECIDE_KINDS_DEFAULT = tuple(kind for kind in NOTIFY_DECIDE_KINDS if kind != "transfer")
# The Inbox lists the cards and questions decided within INBOX_DECIDED_SECONDS, newest first, at
# most INBOX_DECIDED_SHOWN, with how each was decided (docs/notifications.md#how-it-was-decided).
INBOX_DECIDED_SECONDS = 86_400
INBOX_DECIDED_SHOWN = 20

# Watching the relay (docs/operations.md#watching-it): a process reads its own memory for
# `/metrics` at most this often, when it does some work (an idle process wakes for nothing).
METRICS_MEMORY_EVERY_SECONDS = 15.0
# How long the trace context of the call that queued a prompt is kept for its turn (oar.core.tracing).
PROMPT_TRACE_KEEP_SECONDS = 86_400
