// countersign local sandbox — NOT Slack. A Slack-like view of the sandbox workspace: it reads
// /_sandbox/state, listens to /_sandbox/events and acts through /_sandbox/ui/*.
// Safety: no string is ever parsed as HTML. Text becomes DOM text nodes (el() below), so
// whatever a model or a person wrote is shown as text; mrkdwn only adds elements around it.
"use strict";

const ui = {
  config: null, // /_sandbox/ui/config
  ws: null, // the last /_sandbox/state
  me: null, // the sandbox user the page acts as, and the channel it shows
  channel: null,
  collapsed: new Set(), // thread parents the person folded away
  dismissed: new Set(), // ephemerals hidden on this page (Slack forgets them on reload too)
  lastSeen: {}, // channel id -> newest message ts seen there, for unread badges
  modalKey: "", // what the modal shows now; unchanged views are not redrawn mid-typing
  drafts: {}, // typed modal input by "view|block", so a redraw keeps it
  example: "", // the example input last filled in, to know whether the person edited it
  runs: [],
  timers: {},
};
const $ = (id) => document.getElementById(id);

// ----------------------------------------------------------------------- DOM and HTTP helpers

// Every string child becomes a text node; attributes go through setAttribute.
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const button = (cls, testid, onclick, ...label) =>
  el("button", { type: "button", class: cls, "data-testid": testid, onclick }, ...label);

async function api(path, body) {
  const json = { "Content-Type": "application/json" };
  const options = body === undefined ? {} : { method: "POST", headers: json, body: JSON.stringify(body) };
  try {
    const response = await fetch(path, options);
    const data = await response.json().catch(() => null);
    return { ok: response.ok, status: response.status, data: data || {} };
  } catch (err) {
    return { ok: false, status: 0, data: { error: `the sandbox is not reachable (${err})` } };
  }
}

function toast(text) {
  const box = $("toast");
  box.textContent = text;
  box.hidden = false;
  clearTimeout(ui.timers.toast);
  ui.timers.toast = setTimeout(() => { box.hidden = true; }, 6000);
}

// Interaction routes answer {status, body} with the bot's own HTTP answer; say when it failed.
function reportReply(result, what) {
  if (!result.ok) return toast(`${what} failed: ${result.data.error || `HTTP ${result.status}`}`);
  if (result.data.status >= 300) {
    toast(`${what}: the bot answered HTTP ${result.data.status} ${result.data.body || ""}`);
  }
}

// ----------------------------------------------------------------------- names and times

// Ids as Slack shows them; unknown ids stay as they are.
const find = (list, id) => (ui.ws ? ui.ws[list].find((item) => item.id === id) : null);
const userName = (id) => (id === ui.config.bot.id ? ui.config.bot.name : (find("users", id) || {}).real_name || id);
const groupHandle = (id) => (find("usergroups", id) || {}).handle || id;
function channelName(id) {
  const channel = find("channels", id);
  return channel ? (channel.is_im ? ui.config.bot.name : channel.name) : id;
}
const tsDate = (ts) => new Date(Number(String(ts).split(".")[0]) * 1000);
const clock = (date) => date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });

// <!date^unix^format|fallback>: Slack shows it in the reader's time zone, as the browser does.
function slackDate(target, fallback) {
  const [, unix, format = "{date}"] = target.split("^");
  const date = new Date(Number(unix) * 1000);
  if (!Number.isFinite(date.getTime())) return decode(fallback || unix || "");
  const day = (month, weekday) => date.toLocaleDateString([], { year: "numeric", month, day: "numeric", weekday });
  const midnight = (d) => new Date(d).setHours(0, 0, 0, 0);
  const days = Math.round((midnight(date) - midnight(Date.now())) / 864e5);
  const relative = { 0: "today", "-1": "yesterday", 1: "tomorrow" }[days];
  const parts = { date_num: date.toLocaleDateString("sv-SE"), date: day("long"), date_short: day("short"),
    date_long: day("long", "long"), time: clock(date), time_secs: date.toLocaleTimeString() };
  for (const key of ["date", "date_short", "date_long"]) parts[`${key}_pretty`] = relative || parts[key];
  return decode(format).replace(/\{(\w+)\}/g, (m, key) => parts[key] || m);
}

// ----------------------------------------------------------------------- mrkdwn

// The emoji the bot uses (bot/blocks.py, bot/commands.py); other shortcodes stay as text.
const EMOJI = {
  large_green_circle: "🟢", large_yellow_circle: "🟡", large_orange_circle: "🟠",
  red_circle: "🔴", white_circle: "⚪", lock: "🔒", busts_in_silhouette: "👥",
  white_check_mark: "✅", x: "❌", memo: "📝", speech_balloon: "💬", hourglass: "⌛",
  hourglass_flowing_sand: "⏳", grey_question: "❔", warning: "⚠️", no_entry: "⛔",
  wastebasket: "🗑️", ballot_box_with_check: "☑️", robot_face: "🤖", tada: "🎉",
  alarm_clock: "⏰", rotating_light: "🚨", arrow_heading_up: "⤴️", bar_chart: "📊", thread: "🧵",
};
const ENTITIES = { "&amp;": "&", "&lt;": "<", "&gt;": ">" };
// Slack escapes &, < and > in text; show them as the characters (text nodes escape again).
const decode = (text) => String(text).replace(/&(amp|lt|gt);/g, (m) => ENTITIES[m]);
const STYLE = /(^|[\s(\[{"'\uE001])([*_~])(?=\S)([^\n]*?\S)\2(?=$|[\s)\]}.,!?;:"'\uE000])/;
const TAGS = { "*": "strong", _: "em", "~": "s" };

function mrkdwn(text) {
  // private-use markers hold tokens aside below; drop any in the input so it cannot forge one
  const parts = String(text || "").replace(/[\uE000\uE001]/g, "").split("```");
  const balanced = parts.length % 2 === 1;
  return el("div", { class: "mrkdwn" }, parts.map((part, i) => {
    if (i % 2 === 1 && (balanced || i < parts.length - 1)) {
      return el("pre", { class: "code-block" }, decode(part.replace(/^\n|\n$/g, "")));
    }
    return quoted(i % 2 === 1 ? "```" + part : part);
  }));
}

// A line starting with ">" is a quote, as Slack shows it (escaped text has "&gt;" instead).
function quoted(text) {
  return text.split(/(\n)/).map((line) => (line.startsWith(">")
    ? el("span", { class: "quote" }, inline(line.slice(1)))
    : inline(line)));
}

// Code spans, <...> tokens and emoji first (they are not formatted inside), as placeholders;
// then *bold*, _italic_ and ~strike~ around them.
function inline(text) {
  const tokens = [];
  const hold = (node) => `\uE000${tokens.push(node) - 1}\uE001`;
  let s = text.replace(/`([^`\n]+)`/g, (_, code) => hold(el("code", {}, decode(code))));
  s = s.replace(/<([^<>\n]+)>/g, (_, inner) => hold(special(inner)));
  s = s.replace(/:([a-z0-9_+-]+):/g, (m, name) => (EMOJI[name] ? hold(emoji(name)) : m));
  return styled(s, tokens);
}

function styled(s, tokens) {
  const out = [];
  let match;
  while ((match = STYLE.exec(s))) {
    const start = match.index + match[1].length;
    out.push(leaves(s.slice(0, start), tokens));
    out.push(el(TAGS[match[2]], {}, styled(match[3], tokens)));
    s = s.slice(start + match[3].length + 2);
  }
  out.push(leaves(s, tokens));
  return out;
}

function leaves(s, tokens) {
  const pieces = s.split(/\uE000(\d+)\uE001/);
  return pieces.map((piece, i) => (i % 2 ? tokens[Number(piece)] : decode(piece)));
}

const emoji = (name) => el("span", { class: "emoji", title: `:${name}:` }, EMOJI[name]);
const mention = (text, kind) => el("span", { class: `mention mention-${kind}` }, text);

function special(inner) {
  const bar = inner.indexOf("|");
  const target = bar < 0 ? inner : inner.slice(0, bar);
  const label = bar < 0 ? "" : decode(inner.slice(bar + 1));
  if (target.startsWith("@")) return mention("@" + (label || userName(target.slice(1))), "user");
  if (target.startsWith("#")) return mention("#" + (label || channelName(target.slice(1))), "channel");
  if (target.startsWith("!subteam^")) {
    return mention("@" + (label.replace(/^@/, "") || groupHandle(target.slice(9))), "group");
  }
  if (target.startsWith("!date^")) return el("time", { title: label }, slackDate(target, label));
  if (/^!(here|channel|everyone)$/.test(target)) return mention("@" + target.slice(1), "group");
  if (/^(https?:|mailto:)/i.test(target)) {
    const href = decode(target);
    return el("a", { href, target: "_blank", rel: "noopener noreferrer" }, label || href);
  }
  return document.createTextNode(label || decode(target));
}

// plain_text objects still turn :shortcodes: into emoji (Slack's "emoji": true).
function plain(text) {
  const parts = String(text || "").split(/:([a-z0-9_+-]+):/);
  return parts.map((p, i) => (i % 2 ? (EMOJI[p] ? emoji(p) : `:${p}:`) : p));
}
function textObject(t) {
  if (!t) return "";
  return t.type === "mrkdwn" ? mrkdwn(t.text) : el("span", { class: "plain" }, plain(t.text));
}

// ----------------------------------------------------------------------- Block Kit

// ctx: {channel, ts} for a message (buttons clickable), {view} for a modal.
const renderBlocks = (blocks, ctx) => (blocks || []).map((block) => renderBlock(block, ctx));

function renderBlock(block, ctx) {
  switch (block.type) {
    case "header":
      return el("div", { class: "b-header" }, plain(block.text && block.text.text));
    case "section": {
      const fields = (block.fields || []).map((f) => el("div", { class: "b-field" }, textObject(f)));
      return el("div", { class: "b-section" },
        el("div", { class: "b-section-main" },
          block.text && textObject(block.text),
          fields.length > 0 && el("div", { class: "b-fields" }, fields)),
        block.accessory && element(block.accessory, ctx));
    }
    case "context": // images would need the network: their alt text stands in
      return el("div", { class: "b-context" }, (block.elements || []).map((e) =>
        (e.type === "image" ? el("span", {}, `[${e.alt_text || "image"}]`) : textObject(e))));
    case "divider":
      return el("hr", { class: "b-divider" });
    case "actions":
      return el("div", { class: "b-actions" },
        (block.elements || []).map((e) => element(e, { ...ctx, block: block.block_id })));
    case "input":
      return inputBlock(block, ctx);
    default: // image blocks (network) and blocks the bot does not send
      return el("div", { class: "b-unsupported" }, `[${block.type} block: not shown here]`);
  }
}

function element(e, ctx) {
  if (e.type !== "button") return el("span", { class: "b-unsupported" }, `[${e.type}]`);
  const node = button(`btn ${e.style || "default"}`, `button-${e.action_id}`, () => press(ctx, e, node),
    plain(e.text && e.text.text));
  node.disabled = !ctx.ts && !ctx.home; // block_actions from inside a modal are not played
  return node;
}

// A button with a confirm object asks first, as Slack does; only "confirm" sends the click.
async function press(ctx, e, node) {
  if (e.confirm && !(await confirmDialog(e.confirm))) return;
  node.disabled = true;
  const result = ctx.home
    ? await api("/_sandbox/ui/home/click", { user: ui.me, block_id: ctx.block, action_id: e.action_id })
    : await api("/_sandbox/ui/click", { user: ui.me, channel: ctx.channel, ts: ctx.ts, action_id: e.action_id });
  node.disabled = false;
  reportReply(result, `Clicking "${(e.text && e.text.text) || e.action_id}"`);
  refreshSoon();
}

function confirmDialog(confirm) {
  return new Promise((resolve) => {
    const root = $("confirm-root");
    const finish = (answer) => {
      document.removeEventListener("keydown", onKey);
      root.replaceChildren();
      resolve(answer);
    };
    const onKey = (ev) => { if (ev.key === "Escape") finish(false); };
    document.addEventListener("keydown", onKey);
    const label = (t, fallback) => plain((t && t.text) || fallback);
    const ok = button(`btn ${confirm.style || "primary"}`, "confirm-ok", () => finish(true),
      label(confirm.confirm, "Yes"));
    const cancel = button("btn default", "confirm-cancel", () => finish(false), label(confirm.deny, "Cancel"));
    root.replaceChildren(el("div", { class: "overlay confirm-overlay" },
      el("div", { class: "dialog confirm", role: "alertdialog", "aria-modal": "true", "data-testid": "confirm-dialog" },
        el("h2", {}, label(confirm.title, "Are you sure?")),
        el("div", { class: "confirm-text" }, textObject(confirm.text)),
        el("div", { class: "dialog-foot" }, el("span", { class: "sandbox-note" }, "sandbox — not Slack"), cancel, ok))));
    ok.focus();
  });
}

// ----------------------------------------------------------------------- modals

// The view on top of this person's stack: the last one opened and not closed.
function currentView() {
  const open = ui.ws.views.filter((v) => v.user === ui.me && !v.closed);
  return open.length ? open[open.length - 1] : null;
}

function renderModal() {
  const view = currentView();
  const key = view ? `${view.id}|${view.hash}|${JSON.stringify(view.errors)}` : "";
  if (key === ui.modalKey) return;
  ui.modalKey = key;
  const root = $("modal-root");
  if (!view) return root.replaceChildren();
  const v = view.view;
  const ctx = { view: view.id, errors: view.errors || {} };
  const close = () => closeView(view);
  const onsubmit = (ev) => { ev.preventDefault(); submitView(view, form); };
  const submit = v.submit && el("button", { type: "submit", class: "btn primary", "data-testid": "modal-submit" },
    plain(v.submit.text));
  const form = el("form", { class: "dialog modal", role: "dialog", "aria-modal": "true", "data-testid": "modal",
    "data-view-id": view.id, onsubmit },
  el("div", { class: "dialog-head" },
    el("h2", {}, plain(v.title && v.title.text)),
    el("button", { type: "button", class: "x", "aria-label": "Close", onclick: close }, "×")),
  el("div", { class: "modal-body" }, renderBlocks(v.blocks, ctx)),
  el("div", { class: "modal-error", "data-testid": "modal-error", hidden: true }),
  el("div", { class: "dialog-foot" },
    el("span", { class: "sandbox-note" }, "sandbox — not Slack"),
    button("btn default", "modal-cancel", close, plain((v.close && v.close.text) || "Cancel")),
    submit));
  root.replaceChildren(el("div", { class: "overlay" }, form));
  const first = form.querySelector("textarea, input");
  if (first) first.focus();
}

function inputBlock(block, ctx) {
  const e = block.element || {};
  const draftKey = `${ctx.view}|${block.block_id}`;
  const attrs = { class: "modal-input", "data-testid": `modal-input-${block.block_id}`,
    "data-block": block.block_id, "data-action": e.action_id, maxlength: e.max_length,
    placeholder: e.placeholder && e.placeholder.text, oninput: (ev) => { ui.drafts[draftKey] = ev.target.value; } };
  const field = inputElement(e, attrs, draftKey);
  const error = (ctx.errors || {})[block.block_id];
  return el("label", { class: `b-input${error ? " has-error" : ""}` },
    el("span", { class: "input-label" }, plain(block.label && block.label.text),
      block.optional && el("span", { class: "optional" }, " (optional)")),
    field,
    block.hint && el("span", { class: "hint" }, plain(block.hint.text)),
    error && el("span", { class: "input-error", "data-testid": `modal-error-${block.block_id}` }, error));
}

// The element of an input block: a select, a group of checkboxes, or a text field.
function inputElement(e, attrs, draftKey) {
  const drafted = ui.drafts[draftKey];
  if (e.type === "static_select") {
    const choose = el("option", { value: "" }, plain((e.placeholder && e.placeholder.text) || "Choose"));
    const options = (e.options || []).map((o) => el("option", { value: o.value }, plain(o.text && o.text.text)));
    const select = el("select", { ...attrs, oninput: (ev) => { ui.drafts[draftKey] = ev.target.value; } },
      choose, options);
    select.value = drafted !== undefined ? drafted : (e.initial_option ? e.initial_option.value : "");
    return select;
  }
  if (e.type === "checkboxes") {
    const initial = (e.initial_options || []).map((o) => o.value);
    const ticked = drafted !== undefined ? drafted : initial;
    const group = el("span", { ...attrs, class: "modal-checkboxes", "data-kind": "checkboxes" });
    for (const o of e.options || []) {
      const box = el("input", { type: "checkbox", value: o.value, checked: ticked.includes(o.value),
        onchange: () => { ui.drafts[draftKey] = checkedValues(group); } });
      group.append(el("label", {}, box, " ", plain(o.text && o.text.text)));
    }
    return group;
  }
  const field = e.multiline ? el("textarea", { ...attrs, rows: 4 }) : el("input", { ...attrs, type: "text" });
  field.value = drafted || e.initial_value || "";
  return field;
}

function checkedValues(group) {
  return [...group.querySelectorAll("input[type=checkbox]")].filter((b) => b.checked).map((b) => b.value);
}

async function submitView(view, form) {
  const values = {};
  for (const field of form.querySelectorAll("[data-block]")) {
    const { block, action } = field.dataset;
    const value = field.dataset.kind === "checkboxes" ? checkedValues(field) : field.value;
    values[block] = { ...values[block], [action]: value };
  }
  const submit = form.querySelector("[data-testid=modal-submit]");
  if (submit) submit.disabled = true;
  const result = await api("/_sandbox/ui/submit", { user: ui.me, view_id: view.id, values });
  if (submit) submit.disabled = false;
  const box = form.querySelector(".modal-error");
  let problem = result.ok ? "" : result.data.error || `HTTP ${result.status}`;
  if (result.ok && result.data.status >= 300) problem = `the bot answered HTTP ${result.data.status}`;
  box.textContent = problem;
  box.hidden = !problem;
  refreshSoon();
}

async function closeView(view) {
  const result = await api("/_sandbox/ui/close", { user: ui.me, view_id: view.id });
  if (!result.ok) toast(`Closing the modal failed: ${result.data.error}`);
  refreshSoon();
}

// ----------------------------------------------------------------------- channel view

const author = (msg) => ({ name: userName(msg.user || ui.config.bot.id), bot: Boolean(msg.bot_id) });

function avatar(who) {
  const letter = who.bot ? "✓" : (who.name || "?")[0].toUpperCase();
  return el("div", { class: `avatar${who.bot ? " bot" : ""}`, "aria-hidden": "true" }, letter);
}

function meta(who, ts, ...extra) {
  return el("div", { class: "msg-meta" },
    el("span", { class: "author" }, who.name),
    who.bot && el("span", { class: "app-badge" }, "APP"),
    el("span", { class: "time", title: tsDate(ts).toLocaleString() }, clock(tsDate(ts))),
    extra);
}

function content(msg) {
  if (!msg.blocks || !msg.blocks.length) return mrkdwn(msg.text);
  return el("div", { class: "blocks" }, renderBlocks(msg.blocks, { channel: msg.channel, ts: msg.ts }));
}

function messageNode(msg, isReply) {
  const who = author(msg);
  const edited = msg.edited && el("span", { class: "edited", "data-testid": "edited" }, "(edited)");
  return el("div", { class: "msg", "data-testid": `message-${msg.ts}`, "data-channel": msg.channel, "data-ts": msg.ts },
    avatar(who),
    el("div", { class: "msg-body" },
      meta(who, msg.ts, edited),
      content(msg),
      !isReply && threadNode(msg)));
}

function ephemeralNode(eph) {
  const who = { name: ui.config.bot.name, bot: true };
  const dismiss = () => { ui.dismissed.add(`${eph.channel}|${eph.ts}`); renderChannel(); };
  const attrs = { class: "msg ephemeral", "data-testid": "ephemeral", "data-channel": eph.channel, "data-ts": eph.ts };
  return el("div", attrs,
    avatar(who),
    el("div", { class: "msg-body" },
      meta(who, eph.ts, el("span", { class: "only-you" }, "Only visible to you"),
        el("button", { type: "button", class: "link", onclick: dismiss }, "Dismiss")),
      content(eph)));
}

const myEphemerals = () => ui.ws.ephemerals.filter((e) =>
  e.user === ui.me && e.channel === ui.channel && !ui.dismissed.has(`${e.channel}|${e.ts}`));

// Messages and the person's ephemerals, interleaved in time order (ts strings sort as numbers).
const byTime = (messages, ephemerals, draw) => [...messages.map((m) => [m.ts, () => draw(m)]),
  ...ephemerals.map((e) => [e.ts, () => ephemeralNode(e)])].sort((a, b) => (a[0] < b[0] ? -1 : 1)).map((i) => i[1]());

// Replies show under their parent, unfolded unless the person folded them.
function threadNode(msg) {
  const replies = ui.ws.messages.filter((m) => m.channel === msg.channel && m.thread_ts === msg.ts && m.ts !== msg.ts);
  const privately = myEphemerals().filter((e) => e.thread_ts === msg.ts);
  if (!replies.length && !privately.length) return null;
  const key = `${msg.channel}|${msg.ts}`;
  const open = !ui.collapsed.has(key);
  const toggle = () => { open ? ui.collapsed.add(key) : ui.collapsed.delete(key); renderChannel(); };
  const reply = (r) => el("div", { class: "thread-reply", "data-testid": "thread-reply" }, messageNode(r, true));
  const count = `${replies.length} ${replies.length === 1 ? "reply" : "replies"} ${open ? "▾" : "▸"}`;
  return el("div", { class: "thread" },
    el("button", { type: "button", class: "link replies", "data-testid": "thread-toggle",
      "aria-expanded": String(open), onclick: toggle }, count),
    open && el("div", { class: "thread-replies" }, byTime(replies, privately, reply)));
}

// The app's Home tab: the view it last published for this person (views.publish).
const HOME = "home";
const isHome = () => ui.channel === HOME;

function renderHome() {
  const list = $("messages");
  const home = (ui.ws.homes || []).find((v) => v.user === ui.me);
  const none = el("div", { class: "empty", "data-testid": "home-empty" },
    "The app has not published a Home tab for you yet.");
  list.replaceChildren(home
    ? el("div", { class: "home blocks", "data-testid": "home-view" }, renderBlocks(home.view.blocks, { home: true }))
    : none);
  list.dataset.channel = HOME;
  $("channel-title").textContent = `${ui.config.bot.name} — Home`;
  $("channel-purpose").textContent = "what waits for your decision, and what you decided";
}

// Opening the tab sends the app an app_home_opened event, as Slack does.
async function openHome() {
  const result = await api("/_sandbox/ui/home/open", { user: ui.me });
  reportReply(result, "Opening the Home tab");
  refreshSoon();
}

function renderChannel() {
  if (isHome()) return renderHome();
  const list = $("messages");
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 80;
  const topLevel = ui.ws.messages.filter((m) => m.channel === ui.channel && (!m.thread_ts || m.thread_ts === m.ts));
  const parents = new Set(topLevel.map((m) => m.ts));
  const loose = myEphemerals().filter((e) => !parents.has(e.thread_ts)); // not under a shown thread
  const items = byTime(topLevel, loose, (m) => messageNode(m, false));
  const empty = el("div", { class: "empty" }, "No messages here yet. Start a run on the right, or type /approvals help.");
  list.replaceChildren(...(items.length ? items : [empty]));
  if (atBottom || list.dataset.channel !== ui.channel) list.scrollTop = list.scrollHeight;
  list.dataset.channel = ui.channel;
  const channel = ui.ws.channels.find((c) => c.id === ui.channel);
  $("channel-title").textContent = channel && channel.is_im ? `@${channelName(ui.channel)}` : `#${channelName(ui.channel)}`;
  $("channel-purpose").textContent = channel ? channel.purpose || channel.topic || "" : "";
}

// ----------------------------------------------------------------------- sidebar

const newestTs = (id) => ui.ws.messages.reduce((a, m) => (m.channel === id && m.ts > a ? m.ts : a), "");

function channelLink(id, label) {
  const unread = ui.ws.messages.filter((m) => m.channel === id && m.ts > (ui.lastSeen[id] || "")).length;
  const onclick = (ev) => { ev.preventDefault(); selectChannel(id); };
  const classes = `channel-link${id === ui.channel ? " active" : ""}${unread ? " unread" : ""}`;
  return el("a", { href: `#${id}`, class: classes, "data-testid": `channel-${id}`, onclick },
    label, unread > 0 && el("span", { class: "badge" }, String(unread)));
}

function renderSidebar() {
  for (const c of ui.ws.channels) if (!(c.id in ui.lastSeen)) ui.lastSeen[c.id] = newestTs(c.id);
  if (!isHome()) ui.lastSeen[ui.channel] = newestTs(ui.channel);
  $("channels").replaceChildren(...ui.config.channels.map((c) => channelLink(c.id, `# ${c.name}`)));
  const home = el("a", { href: "#home", class: `channel-link${isHome() ? " active" : ""}`, "data-testid": "home-link",
    onclick: (ev) => { ev.preventDefault(); selectChannel(HOME); } }, `⌂ ${ui.config.bot.name} — Home`);
  $("apps").replaceChildren(home);
  const dms = ui.ws.channels.filter((c) => c.is_im && c.im_user === ui.me); // the bot's DMs with me
  const dmLinks = dms.map((c) => channelLink(c.id, `● ${ui.config.bot.name}`));
  $("dms").replaceChildren(...(dmLinks.length ? dmLinks : [el("div", { class: "muted" }, "none yet")]));
  $("users").replaceChildren(...ui.config.users.map((u) => el("button", {
    type: "button", class: `user${u.id === ui.me ? " active" : ""}`, "data-testid": `user-${u.id}`,
    "aria-pressed": String(u.id === ui.me), onclick: () => selectUser(u.id),
  }, el("span", { class: "user-name" }, u.name), el("span", { class: "role" }, u.role))));
}

function selectChannel(id) {
  ui.channel = id;
  renderAll();
  if (isHome()) openHome();
}

function selectUser(id) {
  ui.me = id;
  sessionStorage.setItem("sandbox-user", id);
  ui.modalKey = ""; // a different person sees different modals
  renderAll();
  if (isHome()) openHome(); // their own tab, published for them
}

function renderAll() {
  if (!ui.ws) return;
  renderSidebar();
  renderChannel();
  renderModal();
  $("start-run").textContent = `Start run as ${userName(ui.me)}`;
}

// ----------------------------------------------------------------------- live updates

// Coalesce bursts of change events into one /_sandbox/state fetch at a time.
function refreshSoon() {
  clearTimeout(ui.timers.state);
  ui.timers.state = setTimeout(refreshState, 60);
}

async function refreshState() {
  if (ui.loading) { ui.stale = true; return; }
  ui.loading = true;
  const result = await api("/_sandbox/state");
  ui.loading = false;
  if (result.ok) { ui.ws = result.data; renderAll(); }
  if (ui.stale) { ui.stale = false; refreshSoon(); }
}

function connect() {
  const live = $("live");
  const source = new EventSource("/_sandbox/events");
  source.onopen = () => {
    live.textContent = "● live";
    live.className = "live on";
    ui.runsOff = false;
    refreshSoon(); // catch up on whatever changed while disconnected
    refreshRuns();
  };
  source.onmessage = () => { refreshSoon(); if (!ui.runsOff) runsSoon(); };
  source.onerror = () => { live.textContent = "○ reconnecting…"; live.className = "live off"; };
}

// ----------------------------------------------------------------------- runs panel

function renderAgents() {
  const select = $("agent-select");
  select.replaceChildren(...ui.config.agents.map((a) => el("option", { value: a.name }, a.name)));
  select.addEventListener("change", fillExample);
  fillExample();
}

// A new agent brings its example, unless the person has typed their own input.
function fillExample() {
  const agent = ui.config.agents.find((a) => a.name === $("agent-select").value);
  const input = $("run-input");
  if (agent && (!input.value.trim() || input.value === ui.example)) input.value = agent.example;
  ui.example = agent ? agent.example : "";
}

async function startRun() {
  $("start-run").disabled = true;
  const body = { agent: $("agent-select").value, input: $("run-input").value.trim(), user: ui.me };
  const result = await api("/_sandbox/ui/runs", body);
  $("start-run").disabled = false;
  const problem = result.data.error || `HTTP ${result.status}`;
  $("runs-note").textContent = result.ok ? `Started ${result.data.run_id}.` : `Could not start the run: ${problem}`;
  $("runs-note").className = `runs-note${result.ok ? "" : " error"}`;
  refreshRuns();
}

function runsSoon() {
  clearTimeout(ui.timers.runsSoon);
  ui.timers.runsSoon = setTimeout(refreshRuns, 300);
}

async function refreshRuns() {
  clearTimeout(ui.timers.runs);
  const result = await api("/_sandbox/ui/runs");
  if (!result.ok) {
    $("runs-note").textContent = result.data.error || `Runs are unavailable (HTTP ${result.status}).`;
    $("runs-note").className = "runs-note error";
    ui.runsOff = result.status === 503; // not configured: ask again only after a reconnect
    $("start-run").disabled = ui.runsOff;
    return;
  }
  ui.runs = result.data.runs || [];
  $("start-run").disabled = false;
  if ($("runs-note").classList.contains("error")) $("runs-note").textContent = ""; // recovered
  renderRuns();
  // poll while a run can still change; change events cover the rest
  const live = ui.runs.some((r) => r.status === "running" || r.status === "waiting");
  if (live) ui.timers.runs = setTimeout(refreshRuns, 1500);
}

function renderRuns() {
  const none = el("div", { class: "muted" }, "No runs yet.");
  $("runs-list").replaceChildren(...(ui.runs.length ? ui.runs.map(runCard) : [none]));
}

const summary = (value) => {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > 120 ? `${text.slice(0, 119)}…` : text;
};

function approvalLine(a) {
  const where = a.channel ? ` in #${channelName(a.channel)}` : "";
  const quorum = a.quorum > 1 ? `${a.approvals.length} of ${a.quorum} approvals` : "a decision";
  const what = a.status === "pending"
    ? `waiting for ${quorum}${where}`
    : `${a.status.replace("_", " ")}${a.decided_by ? ` by ${userName(a.decided_by)}` : ""}`;
  return el("div", { "data-testid": "run-approval", "data-status": a.status }, el("code", {}, a.tool), ` ${what}`);
}

function runCard(run) {
  const calls = run.tool_calls || [];
  // pending single-approver requests already show as "pending" tool calls
  const approvals = (run.approvals || []).filter((a) => a.status !== "pending" || a.quorum > 1);
  const by = userName(run.user || run.requested_by || "");
  return el("div", { class: `run status-${run.status}`, "data-testid": `run-${run.run_id}`, "data-status": run.status },
    el("div", { class: "run-head" },
      el("span", { class: "run-agent" }, run.agent),
      el("span", { class: `status ${run.status}`, "data-testid": "run-status" }, run.status)),
    el("div", { class: "run-input" }, `“${run.input || ""}”`, el("span", { class: "muted" }, ` — ${by}`)),
    run.output && el("div", { class: "run-output", "data-testid": "run-output" }, run.output),
    run.error && el("div", { class: "run-error", "data-testid": "run-error" }, run.error),
    calls.length > 0 && el("ul", { class: "tool-calls" }, calls.map((c) =>
      el("li", { "data-testid": "tool-call", "data-outcome": c.outcome || "pending" },
        el("code", {}, c.tool), " ", el("span", { class: "args" }, summary(c.arguments)),
        el("span", { class: `outcome ${c.outcome || "pending"}` }, c.outcome || "pending")))),
    approvals.length > 0 && el("div", { class: "approvals" }, approvals.map(approvalLine)),
    el("div", { class: "run-id muted" }, run.run_id));
}

// ----------------------------------------------------------------------- start

function bindComposer() {
  $("composer-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const input = $("composer");
    const text = input.value.trim();
    const command = ui.config.slash_command;
    if (!text) return;
    if (isHome()) return toast(`Run ${command} in a channel; the Home tab takes no commands.`);
    if (text !== command && !text.startsWith(`${command} `)) {
      return toast(`This sandbox only runs ${command} commands (try "${command} help").`);
    }
    input.value = "";
    const body = { user: ui.me, channel: ui.channel, text: text.slice(command.length).trim() };
    const result = await api("/_sandbox/ui/slash", body);
    reportReply(result, command);
    refreshSoon();
  });
}

async function start() {
  const result = await api("/_sandbox/ui/config");
  if (!result.ok) return toast(`The sandbox did not answer: ${result.data.error || result.status}`);
  ui.config = result.data;
  const params = new URLSearchParams(location.search);
  const known = (id) => ui.config.users.some((u) => u.id === id);
  // ?user=U0ADMIN picks who the page acts as; otherwise this tab's last choice, then the default
  ui.me = [params.get("user"), sessionStorage.getItem("sandbox-user")].find(known) || ui.config.default_user;
  ui.channel = params.get("channel") || ui.config.default_channel;
  $("team-name").textContent = ui.config.team;
  bindComposer();
  $("start-run").addEventListener("click", startRun);
  renderAgents();
  await refreshState();
  connect();
  if (isHome()) openHome(); // ?channel=home opens the Home tab
}

start();
