"""The Bolt listeners, one module per kind of Slack request; `bot.app` registers them.

- `buttons`: Approve / Approve for this run / Approve with comment / Edit & approve /
  Reject / Answer clicks
- `bulk`: a message of many calls: Approve all, Reject all (and its form), one by one
- `forms`: the reject, answer, comment and edit modals' submissions
- `commands`: the `/approvals` slash command (its logic is `bot.slash_commands`)
- `replies`: what a listener tells the person, and when it cannot decide
- `after_ack`: the work a listener starts after its ack, as owned tasks
"""
