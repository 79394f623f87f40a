"""The Lua scripts that make each state change of a run atomic.

Each script touches the keys of one run and of the shard it lives in, which share one hash
tag (see `keys`), so it is atomic on a single Redis and on a Redis Cluster alike. Every
script checks before it writes, so a stale or duplicate caller changes nothing:
`pause` and `finish` are fenced by the run's current pause id, `decide` is a
compare-and-set on the request's status.
"""

from __future__ import annotations

__all__ = [
    "CLEAR_PROGRESS",
    "CREATE",
    "CREATE_EXTERNAL",
    "DECIDE",
    "FINISH",
    "PAUSE",
    "SAVE_PROGRESS",
]

# KEYS: run, run audit, shard runs, shard resume
# ARGV: run id, fields as JSON, created score, now, actor
CREATE = """
local fields = cjson.decode(ARGV[2])
local flat = {}
for k, v in pairs(fields) do flat[#flat + 1] = k; flat[#flat + 1] = v end
redis.call('HSET', KEYS[1], unpack(flat))
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
redis.call('XADD', KEYS[2], '*', 'at', ARGV[4], 'actor', ARGV[5], 'event', 'started')
redis.call('XADD', KEYS[4], '*', 'type', 'start', 'run_id', ARGV[1], 'pause_id', '')
return 1
"""

# The escalation ladder of a new pending request: its route's reminder and escalation, each
# due (by Redis's clock, like the deadline) that long after now if set and before the
# deadline. Members are "<step>|<request id>"; the sweeper claims each once (LADDER_STEP).
_SCHEDULE_LADDER = """
local function schedule_ladder(ladder, rid, route_json, now_n, expiry)
  local ok, route = pcall(cjson.decode, route_json or '')
  if not ok or type(route) ~= 'table' then return end
  for _, step in ipairs({'remind', 'escalate'}) do
    local after = tonumber(route[step .. '_after_seconds']) or 0
    local wanted = step == 'remind' or (type(route['escalate_to']) == 'string'
      and route['escalate_to'] ~= '')
    if wanted and after > 0 and after < expiry then
      redis.call('ZADD', ladder, string.format('%d', math.floor((now_n + after) * 1000)),
        step .. '|' .. rid)
    end
  end
end
"""

# Whether the run (its hash at `run_key`) is still at `pause_id` and not over: a run that
# failed without a final state keeps its pause id, and a worker still resuming that pause
# must not pause it again nor finish it a second time.
_AT_PAUSE = """
local function at_pause(run_key, pause_id)
  local run = redis.call('HMGET', run_key, 'pause_id', 'status')
  return run[2] ~= 'succeeded' and run[2] ~= 'failed' and (run[1] or '') == pause_id
end
"""

# KEYS: run, checkpoint, requests, run audit, PENDING, DEADLINES, OUTBOX, RESUME, then per
#       request: request hash, pending-by-destination zset; then per bulk: its hash;
#       last: LADDER
# ARGV: expected pause id, new pause id, checkpoint blob, now, actor, n, then per request:
#       request id, created score, seconds until its deadline, fields as JSON; then the
#       number of bulks and per bulk: its id, its fields as JSON
# Deadlines are set from Redis's clock (TIME), the one DECIDE and the sweeper check, so a
# worker whose clock is off cannot post a request that is already due or due too late.
# A request whose fields arrive already decided (a call covered by a standing approval) is
# recorded and audited but never listed, posted or swept; if every request of the pause is
# such, the run is queued to resume at once. A request with a `bulk_id` is posted with the
# others of its bulk: one `requests_posted_bulk` entry per bulk instead of one each.
PAUSE = (
    _SCHEDULE_LADDER
    + _AT_PAUSE
    + """
if not at_pause(KEYS[1], ARGV[1]) then return 0 end
local n = tonumber(ARGV[6])
redis.call('SET', KEYS[2], ARGV[3])
local t = redis.call('TIME')
local now_n = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ids = {}
local undecided = 0
for i = 1, n do
  local base = 6 + (i - 1) * 4
  local rid, created = ARGV[base + 1], ARGV[base + 2]
  local deadline = now_n + tonumber(ARGV[base + 3])
  local expires = string.format('%d', math.floor(deadline * 1000))
  local fields = cjson.decode(ARGV[base + 4])
  fields['expires_at'] = string.format('%.6f', deadline)
  local flat = {}
  for k, v in pairs(fields) do flat[#flat + 1] = k; flat[#flat + 1] = v end
  local req_key, by_dest = KEYS[8 + (i - 1) * 2 + 1], KEYS[8 + (i - 1) * 2 + 2]
  redis.call('HSET', req_key, unpack(flat))
  redis.call('RPUSH', KEYS[3], rid)
  if fields['status'] == 'pending' then
    undecided = undecided + 1
    redis.call('ZADD', KEYS[5], created, rid)
    redis.call('ZADD', by_dest, created, rid)
    redis.call('ZADD', KEYS[6], expires, rid)
    schedule_ladder(KEYS[#KEYS], rid, fields['route'], now_n, tonumber(ARGV[base + 3]))
    if (fields['bulk_id'] or '') == '' then
      redis.call('XADD', KEYS[7], '*', 'type', 'request_posted', 'request_id', rid)
    end
  else
    redis.call('XADD', KEYS[4], '*', 'at', ARGV[4], 'actor', fields['decided_by'],
      'event', fields['status'], 'request_id', rid, 'call_hash', fields['call_hash'],
      'detail', fields['decision'])
  end
  ids[#ids + 1] = rid
end
local bulks = tonumber(ARGV[6 + n * 4 + 1] or '0')
for j = 1, bulks do
  local bulk_id = ARGV[6 + n * 4 + 1 + (j - 1) * 2 + 1]
  local bulk = cjson.decode(ARGV[6 + n * 4 + 1 + (j - 1) * 2 + 2])
  local flat = {}
  for k, v in pairs(bulk) do flat[#flat + 1] = k; flat[#flat + 1] = v end
  redis.call('HSET', KEYS[8 + n * 2 + j], unpack(flat))
  redis.call('XADD', KEYS[7], '*', 'type', 'requests_posted_bulk', 'bulk_id', bulk_id)
end
local status = 'waiting'
if undecided == 0 then status = 'resuming' end
redis.call('HSET', KEYS[1], 'status', status, 'pause_id', ARGV[2], 'undecided', undecided,
  'pause_requests', cjson.encode(ids), 'updated_at', ARGV[4])
redis.call('XADD', KEYS[4], '*', 'at', ARGV[4], 'actor', ARGV[5], 'event', 'paused',
  'detail', cjson.encode(ids))
if undecided == 0 then
  redis.call('HSET', KEYS[1], 'decided_at', ARGV[4])
  local run_id = redis.call('HGET', KEYS[1], 'run_id')
  redis.call('XADD', KEYS[8], '*', 'type', 'resume', 'run_id', run_id, 'pause_id', ARGV[2],
    'requests', cjson.encode(ids))
end
return 1
"""
)

# An approval request from an agent that runs elsewhere: a run with one pending request and
# no checkpoint, indexed, given its deadline and queued for posting like one of PAUSE's. With
# a caller's external id (ARGV[1] "1") the first creation wins: the same id later answers
# the request it made ('exists'), or 'conflict' if the body is not the same.
# KEYS: external id key, run, requests, run audit, PENDING, DEADLINES, OUTBOX, RUNS, request,
#       pending-by-destination, LADDER
# ARGV: has external id, body fingerprint, run id, request id, run fields JSON, request fields
#       JSON, created score, seconds until its deadline, now, actor
CREATE_EXTERNAL = (
    _SCHEDULE_LADDER
    + """
if ARGV[1] == '1' then
  local seen = redis.call('HMGET', KEYS[1], 'request_id', 'fingerprint')
  if seen[1] then
    if seen[2] == ARGV[2] then return {'exists', seen[1]} end
    return {'conflict', seen[1]}
  end
  redis.call('HSET', KEYS[1], 'request_id', ARGV[4], 'fingerprint', ARGV[2])
end
local t = redis.call('TIME')
local deadline = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[8])
local run = cjson.decode(ARGV[5])
local flat = {}
for k, v in pairs(run) do flat[#flat + 1] = k; flat[#flat + 1] = v end
redis.call('HSET', KEYS[2], unpack(flat))
local fields = cjson.decode(ARGV[6])
fields['expires_at'] = string.format('%.6f', deadline)
flat = {}
for k, v in pairs(fields) do flat[#flat + 1] = k; flat[#flat + 1] = v end
redis.call('HSET', KEYS[9], unpack(flat))
redis.call('RPUSH', KEYS[3], ARGV[4])
redis.call('ZADD', KEYS[8], ARGV[7], ARGV[3])
redis.call('ZADD', KEYS[5], ARGV[7], ARGV[4])
redis.call('ZADD', KEYS[10], ARGV[7], ARGV[4])
redis.call('ZADD', KEYS[6], string.format('%d', math.floor(deadline * 1000)), ARGV[4])
schedule_ladder(KEYS[11], ARGV[4], fields['route'], deadline - tonumber(ARGV[8]),
  tonumber(ARGV[8]))
redis.call('XADD', KEYS[4], '*', 'at', ARGV[9], 'actor', ARGV[10], 'event', 'requested',
  'request_id', ARGV[4], 'call_hash', fields['call_hash'])
redis.call('XADD', KEYS[7], '*', 'type', 'request_posted', 'request_id', ARGV[4])
return {'created', ARGV[4]}
"""
)

# KEYS: request, approvers, run, run audit, PENDING, DEADLINES, RESUME, OUTBOX, METRICS,
#       pending-by-destination, CALLBACKS, LADDER
# ARGV: request id, kind, terminal status, decision JSON, decider, seen hash,
#       completes quorum ("1": this approval decides whatever the quorum), and whom else an
#       approval's vote counts for, case-folded ('' for nobody: see `RunStore.decide`)
# Time is Redis's own (TIME), never the caller's: a replica whose clock lags cannot decide
# after the deadline, and one whose clock runs ahead cannot expire a request early.
# A terminal decision queues the request's callback, if it has a callback URL, in the
# same step (long polls see the status change: `decision_watch`). A request from an agent that runs
# elsewhere (origin "external") has no checkpoint here: its decided run resumes nothing.
# An approval towards a quorum keeps its decision (e.g. the approver's comment) in the audit.
# A decision or a vote recorded returns the request as it now is (its hash, as HGETALL
# gives it), so the caller answers from it without reading it again.
DECIDE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'not_found', 0} end
local f = redis.call('HMGET', KEYS[1], 'status', 'call_hash', 'quorum', 'run_id', 'pause_id',
  'expires_at', 'kind', 'origin', 'callback_url')
if f[1] ~= 'pending' then return {'already_decided', 0} end
local kind = ARGV[2]
local fits = kind == 'reject' or kind == 'expired'
  or ((kind == 'approve' or kind == 'request_changes') and f[7] == 'approval')
  or (kind == 'answer' and f[7] == 'question')
if not fits then return {'wrong_kind', 0} end
local t = redis.call('TIME')
local now_n = tonumber(t[1]) + tonumber(t[2]) / 1000000
local now = string.format('%.6f', now_n)
if kind == 'expired' then
  if now_n < tonumber(f[6]) then return {'not_due', 0} end
elseif now_n > tonumber(f[6]) then
  -- Past its deadline a request can only expire (the sweeper may just not have run yet).
  return {'past_deadline', 0}
end
if ARGV[6] ~= '' and ARGV[6] ~= f[2] then return {'hash_mismatch', 0} end
local hash = f[2]
if kind == 'approve' then
  -- A vote claimed for someone (ARGV[8], case-folded) is kept as 'claimed:<id>': it and
  -- that person's own vote count as one, whatever the case of their ids.
  local also, voter = ARGV[8] or '', string.lower(ARGV[5])
  for _, member in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    local m = string.lower(member)
    if m == 'claimed:' .. voter or (also ~= '' and (m == also or m == 'claimed:' .. also)) then
      return {'duplicate_vote', 0}
    end
  end
  if redis.call('SADD', KEYS[2], ARGV[5]) == 0 then return {'duplicate_vote', 0} end
  if also ~= '' then redis.call('SADD', KEYS[2], 'claimed:' .. also) end
  local approvals = redis.call('HGET', KEYS[1], 'approvals')
  local list = cjson.decode(approvals ~= '' and approvals or '[]')
  list[#list + 1] = ARGV[5]
  redis.call('HSET', KEYS[1], 'approvals', cjson.encode(list))
  if #list < tonumber(f[3] or '1') and ARGV[7] ~= '1' then
    redis.call('XADD', KEYS[4], '*', 'at', now, 'actor', ARGV[5], 'event', 'approval',
      'request_id', ARGV[1], 'call_hash', hash, 'detail', #list .. ' of ' .. f[3],
      'decision', ARGV[4])
    redis.call('XADD', KEYS[8], '*', 'type', 'request_progress', 'request_id', ARGV[1])
    return {'progress', #list, redis.call('HGETALL', KEYS[1])}
  end
end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'decision', ARGV[4], 'decided_by', ARGV[5],
  'decided_at', now)
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('ZREM', KEYS[10], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('ZREM', KEYS[12], 'remind|' .. ARGV[1], 'escalate|' .. ARGV[1])
redis.call('HINCRBY', KEYS[9], 'decisions_' .. ARGV[3], 1)
redis.call('XADD', KEYS[4], '*', 'at', now, 'actor', ARGV[5], 'event', ARGV[3],
  'request_id', ARGV[1], 'call_hash', hash, 'detail', ARGV[4])
redis.call('XADD', KEYS[8], '*', 'type', 'request_decided', 'request_id', ARGV[1])
if f[9] and f[9] ~= '' then
  redis.call('XADD', KEYS[11], '*', 'request_id', ARGV[1], 'attempt', '1', 'not_before', '0')
end
local left = redis.call('HINCRBY', KEYS[3], 'undecided', -1)
if f[8] == 'external' then
  if left == 0 then
    redis.call('HSET', KEYS[3], 'status', 'succeeded', 'output', ARGV[3], 'decided_at', now,
      'updated_at', now)
  end
  return {'decided', 0, redis.call('HGETALL', KEYS[1])}
end
if left == 0 then
  redis.call('HSET', KEYS[3], 'status', 'resuming', 'decided_at', now)
  -- The pause's request ids go with the entry: the worker reads them with the run.
  redis.call('XADD', KEYS[7], '*', 'type', 'resume', 'run_id', f[4], 'pause_id', f[5],
    'requests', redis.call('HGET', KEYS[3], 'pause_requests') or '[]')
  return {'decided', 1, redis.call('HGETALL', KEYS[1])}
end
return {'decided', 0, redis.call('HGETALL', KEYS[1])}
"""

# KEYS: run, checkpoint, run audit, OUTBOX, progress, the run's request list
# ARGV: expected pause id, status, output, error, final state blob, now, actor, final pause id,
# and for a model's final answer its turn. Returns 1 when finished, 0 when the run moved on,
# or {'taken', progress blob} (a final answer only: see below).
FINISH = (
    _AT_PAUSE
    + """
if not at_pause(KEYS[1], ARGV[1]) then return 0 end
-- A final answer is the model's response of its turn, saved as SAVE_PROGRESS saves one:
-- a turn another worker saved first for this pause, this one or a later, wins, and this
-- worker goes on from it instead.
if ARGV[9] then
  local saved = redis.call('HMGET', KEYS[5], 'pause_id', 'turn', 'blob')
  if saved[1] == ARGV[1] and tonumber(saved[2]) >= tonumber(ARGV[9]) then
    return {'taken', saved[3]}
  end
end
-- The checkpoint and the pause id it is sealed to change together: without a final
-- state the last pause's checkpoint stays, readable under its own pause id.
local pause_id = ARGV[1]
if ARGV[5] ~= '' then
  redis.call('SET', KEYS[2], ARGV[5])
  pause_id = ARGV[8]
end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'output', ARGV[3], 'error', ARGV[4],
  'pause_id', pause_id, 'undecided', 0, 'updated_at', ARGV[6])
-- A finished run has no pause left to replay: its saved turn goes in the same step.
redis.call('DEL', KEYS[5])
redis.call('XADD', KEYS[3], '*', 'at', ARGV[6], 'actor', ARGV[7], 'event', ARGV[2],
  'detail', ARGV[4] ~= '' and ARGV[4] or ARGV[3])
local run_id = redis.call('HGET', KEYS[1], 'run_id')
-- The run's request ids go with the notification: its delivery reads the run and them in
-- one round trip.
local ids = table.concat(redis.call('LRANGE', KEYS[6], 0, -1), ',')
redis.call('XADD', KEYS[4], '*', 'type', 'run_finished', 'run_id', run_id, 'request_ids', ids)
return 1
"""
)

# A run's progress: the state right after a model response, saved before any of its calls
# runs. Fenced like FINISH by the pause id being resumed (and a live run); per pause the
# first save of a turn wins, so two workers racing on one entry settle on one response.
# KEYS: run, progress
# ARGV: expected pause id, turn, progress blob
SAVE_PROGRESS = """
local run = redis.call('HMGET', KEYS[1], 'pause_id', 'status')
if not run[2] or run[2] == 'succeeded' or run[2] == 'failed' or (run[1] or '') ~= ARGV[1] then
  return {'moved_on', ''}
end
local saved = redis.call('HMGET', KEYS[2], 'pause_id', 'turn', 'blob')
if saved[1] == ARGV[1] and tonumber(saved[2]) >= tonumber(ARGV[2]) then
  return {'taken', saved[3]}
end
redis.call('HSET', KEYS[2], 'pause_id', ARGV[1], 'turn', ARGV[2], 'blob', ARGV[3])
return {'saved', ''}
"""

# Drop the progress of a pause once its outcome is saved (never a later pause's progress).
# KEYS: progress
# ARGV: pause id
CLEAR_PROGRESS = """
if redis.call('HGET', KEYS[1], 'pause_id') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


# A consumer's heartbeat: resets the idle time of the entries it holds, but only of those
# still pending under its own name. One another consumer reclaimed meanwhile (this one's
# loop stalled past `idle_ms`) stays with that one. KEYS: the stream. ARGV: group,
# consumer, entry ids. Returns the ids kept.
KEEP_CLAIMED = """
local group, consumer = ARGV[1], ARGV[2]
local mine = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if #redis.call('XPENDING', KEYS[1], group, id, id, 1, consumer) > 0 then
    mine[#mine + 1] = id
  end
end
for first = 1, #mine, 500 do
  local claim = {'XCLAIM', KEYS[1], group, consumer, 0}
  for i = first, math.min(first + 499, #mine) do
    claim[#claim + 1] = mine[i]
  end
  claim[#claim + 1] = 'JUSTID'
  redis.call(unpack(claim))
end
return mine
"""


# Entries whose handling ended without dying (a failure that was caught, or a consumer
# stopping on purpose): their delivery count starts again, and the count of their attempts
# as suspects is dropped (see `poison`), but only for those still pending under this
# consumer's own name: one another consumer took over meanwhile stays as it is. KEYS: the
# stream, its attempts hash. ARGV: group, consumer, entry ids.
COUNT_AFRESH = """
local group, consumer = ARGV[1], ARGV[2]
for i = 3, #ARGV do
  local id = ARGV[i]
  if #redis.call('XPENDING', KEYS[1], group, id, id, 1, consumer) > 0 then
    redis.call('XCLAIM', KEYS[1], group, consumer, 0, id, 'RETRYCOUNT', 0, 'JUSTID')
    redis.call('HDEL', KEYS[2], id)
  end
end
return 0
"""


# One more error of countersign's own for an entry, counted only while it is pending under
# this consumer's name (one another consumer took over, and maybe acknowledged, is not this
# one's to count): returns the count, 0 when it is not. KEYS: the stream, the entry's error
# counter. ARGV: group, consumer, entry id, seconds the count is kept after its last error.
COUNT_ERROR = """
local id = ARGV[3]
if #redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1, ARGV[2]) == 0 then
  return 0
end
local count = redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return count
"""
