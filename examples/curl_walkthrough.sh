#!/usr/bin/env bash
# Ask countersign for approval from any language, with curl: create a request, watch it
# appear in Slack (or the sandbox page of `make demo`), approve it, read the decision.
#
#   COUNTERSIGN_URL=http://localhost:3000 COUNTERSIGN_API_TOKEN=... bash examples/curl_walkthrough.sh
#
# With `make demo`, use the COUNTERSIGN_URL and token the demo prints (its API is not on the
# sandbox page's port).
#
# With COUNTERSIGN_WEBHOOK_SECRET set, step 3 approves through the signed webhook (needs
# openssl); without it, click Approve in Slack or on the sandbox page while step 4 waits.
set -euo pipefail

URL="${COUNTERSIGN_URL:-http://localhost:3000}"
TOKEN="${COUNTERSIGN_API_TOKEN:?set COUNTERSIGN_API_TOKEN to the API token of the server}"
AUTH="Authorization: Bearer ${TOKEN}"
EXTERNAL_ID="${EXTERNAL_ID:-curl-walkthrough-$(date +%s)}"

echo "1. create the request"
created=$(curl -sS --fail-with-body -X POST "${URL}/api/v1/approvals" \
  -H "${AUTH}" -H "Content-Type: application/json" \
  -d '{"agent": "billing-bot", "tool": "issue_refund",
       "arguments": {"order_id": 123, "amount": 40},
       "reason": "refunds move money", "severity": "high",
       "external_id": "'"${EXTERNAL_ID}"'"}')
echo "   ${created}"
request_id=$(printf '%s' "${created}" | sed -n 's/.*"request_id": *"\([^"]*\)".*/\1/p')

echo "2. it waits for a decision (and is posted to Slack / the sandbox page)"
curl -sS --fail-with-body "${URL}/api/v1/approvals/${request_id}" -H "${AUTH}" | head -c 300
echo

if [[ -n "${COUNTERSIGN_WEBHOOK_SECRET:-}" ]]; then
  echo "3. approve it through the signed webhook"
  body='{"requestId": "'"${request_id}"'", "decision": "approved", "feedback": "ok"}'
  signature="sha256=$(printf '%s' "${body}" \
    | openssl dgst -sha256 -hmac "${COUNTERSIGN_WEBHOOK_SECRET}" | sed 's/^.*= //')"
  curl -sS --fail-with-body -X POST "${URL}/api/v1/webhooks/approval-response" \
    -H "Content-Type: application/json" -H "X-Webhook-Signature: ${signature}" -d "${body}"
  echo
else
  echo "3. click Approve on the message in Slack (or on the sandbox page)"
fi

echo "4. read the decision (long poll: it answers as soon as someone decides)"
while true; do
  state=$(curl -sS --fail-with-body "${URL}/api/v1/approvals/${request_id}?wait=60" -H "${AUTH}")
  verdict=$(printf '%s' "${state}" | sed -n 's/.*"verdict": *"\([a-z_]*\)".*/\1/p')
  if [[ -n "${verdict}" ]]; then
    echo "   verdict: ${verdict}"
    break
  fi
done
