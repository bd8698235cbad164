/* chronik console: one page, hash routes, the JSON API under /console/api/.
 *
 * Rules kept here:
 * - Data never goes through innerHTML: every element is built with el() and text set with
 *   textContent, so a record's key, value or header cannot inject markup or script.
 *   The Content-Security-Policy forbids inline script and style: no onclick=, no style=.
 * - Every write (POST/PUT/PATCH/DELETE) carries the session's X-CSRF-Token.
 * - The visible page's live figures refresh every 3 s (fetch, no reload); a page that is
 *   no longer shown drops its late answers.
 *
 * Hooks for the browser tests (data-test attributes):
 *   sidebar, nav-<page> (overview topics groups aggregates schemas security), principal,
 *   logout, refreshed (data-count = live refreshes done), error (last error), page-<name>
 *   on the shown page's root (overview topics topic messages groups group aggregates
 *   schemas security login).
 *   Tables: data-test=<name>-table; each body row has data-key (its id: topic name,
 *   "partition", "topic:partition", group id, "partition:offset", version, subject...)
 *   and its cells data-col=<field>.
 *   login: login-form login-username login-password login-submit
 *   overview: stat-brokers stat-controller stat-topics stat-partitions
 *     stat-under-replicated stat-offline cluster-id brokers-table
 *     under-replicated-table offline-table
 *   lists: <list>-filter, pager-prev, pager-next, pager-info (topics groups schemas)
 *   topics: topics-table topic-internal topic-create-name topic-create-partitions
 *     topic-create-rf topic-create-configs topic-create-submit; per row topic-delete,
 *     then topic-delete-confirm / topic-delete-cancel
 *   topic: partitions-table partitions-prev partitions-next partitions-info configs-table config-name config-value config-set
 *     config-delete config-result config-filter config-only-set topic-messages-link
 *   messages: msg-partition msg-from msg-offset msg-timestamp msg-limit msg-key
 *     msg-format msg-load msg-next msg-status messages-table
 *   groups: groups-table; group: group-state group-members group-total-lag
 *     group-coordinator members-table offsets-table offsets-prev offsets-next
 *     offsets-info reset-topic reset-partitions reset-to
 *     reset-value reset-dry-run reset-apply reset-result reset-table group-delete
 *     group-delete-confirm
 *   aggregates: agg-topic agg-key agg-load agg-version-count agg-partition events-table
 *     agg-more agg-expected agg-value agg-append agg-result
 *   schemas: schemas-table schema-subject schema-version schema-text schema-diff-from
 *     schema-diff-to schema-diff schema-compat
 *   security: acls-table users-table acl-principal acl-resource-type security-off
 */
"use strict";

(function () {
  const API = "/console/api/";
  const REFRESH_MS = 3000;
  const PAGE_SIZE = 50;

  const session = { secured: false, principal: null, csrf: null };
  let current = null; // the shown page: {refresh(), alive}
  let refreshCount = 0;

  // ---- DOM building -------------------------------------------------------------------

  /** el("tag", {attrs}, children...): attrs "class", "test" (data-test), "key"
   *  (data-key), "col" (data-col), "on" ({event: fn}), "text"; other names become
   *  attributes or, for value/checked/disabled/hidden, properties. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "test") node.dataset.test = value;
      else if (name === "key") node.dataset.key = String(value);
      else if (name === "col") node.dataset.col = value;
      else if (name === "text") node.textContent = String(value);
      else if (name === "on") {
        for (const [event, fn] of Object.entries(value)) node.addEventListener(event, fn);
      } else if (name === "value" || name === "checked" || name === "disabled" || name === "hidden") {
        node[name] = value;
      } else node.setAttribute(name, value === true ? "" : String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      if (Array.isArray(child)) append(node, child);
      else if (child instanceof Node) node.appendChild(child);
      else node.appendChild(document.createTextNode(String(child)));
    }
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function replace(node, ...children) {
    clear(node);
    append(node, children);
    return node;
  }

  function link(href, text, test) {
    return el("a", { href: href, test: test }, text);
  }

  function field(label, input) {
    return el("div", { class: "field" }, el("label", {}, label), input);
  }

  function option(value, text, selected) {
    return el("option", { value: value, selected: selected ? "selected" : null }, text);
  }

  function selectOf(test, values, chosen) {
    return el(
      "select",
      { test: test },
      values.map(([v, t]) => option(v, t, String(v) === String(chosen)))
    );
  }

  // ---- formatting ---------------------------------------------------------------------

  function fmtNum(n) {
    if (n === null || n === undefined) return "–";
    return String(n);
  }

  function fmtBytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let v = n;
    let i = 0;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i++;
    }
    return (i === 0 ? String(v) : v.toFixed(1)) + " " + units[i];
  }

  function fmtRate(r) {
    if (r === null || r === undefined) return "–";
    return r < 10 ? r.toFixed(2) : r.toFixed(0);
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined) return "–";
    const n = Number(ms);
    if (!Number.isFinite(n)) return String(ms);
    if (n < 0) return "forever";
    const units = [
      [86400000, "d"],
      [3600000, "h"],
      [60000, "min"],
      [1000, "s"],
    ];
    for (const [size, unit] of units) {
      if (n >= size && n % size === 0) return n / size + " " + unit;
    }
    return n + " ms";
  }

  function fmtTime(ms) {
    if (ms === null || ms === undefined || ms < 0) return "–";
    const d = new Date(ms);
    const pad = (x, w) => String(x).padStart(w || 2, "0");
    return (
      d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + "." +
      pad(d.getMilliseconds(), 3)
    );
  }

  function cell(col, value, cls) {
    return el("td", { col: col, class: cls }, value);
  }

  function numCell(col, value) {
    return el("td", { col: col, class: "num" }, fmtNum(value));
  }

  /** One record header: its name as a tag, its value (hex marked) or null. */
  function headerLine(h) {
    return el(
      "div",
      { class: "mono" },
      el("span", { class: "tag" }, h.key),
      h.value_format === "hex" ? el("span", { class: "tag" }, "hex") : null,
      h.value === null ? el("span", { class: "note" }, "null") : h.value
    );
  }

  /** A table: columns [[field, title, numeric?]]; rows built by the caller. */
  function table(test, columns, rows, emptyText) {
    const head = el(
      "tr",
      {},
      columns.map(([col, title, numeric]) => el("th", { class: numeric ? "num" : null }, title))
    );
    const body = el("tbody", {}, rows);
    if (!rows.length) {
      body.appendChild(
        el("tr", {}, el("td", { class: "empty", colspan: columns.length }, emptyText || "none"))
      );
    }
    return el("div", { class: "table-wrap" }, el("table", { test: test }, el("thead", {}, head), body));
  }

  // ---- the API ------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, body) {
      super((body && (body.message || body.error)) || "HTTP " + status);
      this.status = status;
      this.body = body || {};
      this.code = this.body.error || String(status);
    }
  }

  async function api(method, path, body) {
    try {
      return await send(method, path, body);
    } catch (err) {
      // An expired session (unsecured broker) leaves the page a stale token: take the new
      // session's token and try the write once more. A secured broker answers 401 instead.
      if (err.code !== "csrf" || method === "GET" || session.secured) throw err;
      const s = await send("GET", "session");
      session.csrf = s.csrf;
      return await send(method, path, body);
    }
  }

  async function send(method, path, body) {
    const headers = { Accept: "application/json" };
    const init = { method: method, headers: headers, credentials: "same-origin", cache: "no-store" };
    if (method !== "GET") {
      if (session.csrf) headers["X-CSRF-Token"] = session.csrf;
      if (body !== undefined) {
        headers["Content-Type"] = "application/json";
        init.body = JSON.stringify(body);
      }
    }
    const response = await fetch(API + path, init);
    let doc = null;
    const text = await response.text();
    if (text) {
      try {
        doc = JSON.parse(text);
      } catch (e) {
        doc = { error: "bad_response", message: text.slice(0, 200) };
      }
    }
    if (!response.ok) {
      if (response.status === 401 && !path.startsWith("login")) {
        session.principal = null;
        showLogin();
      }
      throw new ApiError(response.status, doc);
    }
    return doc;
  }

  function query(params) {
    const parts = [];
    for (const [k, v] of Object.entries(params)) {
      if (v === undefined || v === null || v === "") continue;
      parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(v));
    }
    return parts.length ? "?" + parts.join("&") : "";
  }

  const enc = encodeURIComponent;

  function showError(err) {
    const banner = document.getElementById("error");
    if (!err) {
      banner.hidden = true;
      banner.textContent = "";
      return;
    }
    const code = err.code && err.code !== err.message ? err.code + ": " : "";
    banner.textContent = code + (err.message || String(err));
    banner.hidden = false;
  }

  // ---- routing and live refresh ----------------------------------------------------------

  const NAV = [
    ["overview", "Overview"],
    ["topics", "Topics"],
    ["groups", "Consumer groups"],
    ["aggregates", "Aggregates"],
    ["schemas", "Schemas"],
    ["security", "Security"],
  ];

  function renderNav(active) {
    const nav = document.getElementById("nav");
    replace(
      nav,
      NAV.filter(([name]) => name !== "security" || session.secured).map(([name, title]) =>
        el(
          "li",
          {},
          el("a", { href: "#/" + name, test: "nav-" + name, class: name === active ? "active" : null }, title)
        )
      )
    );
  }

  /** "#/topics/a%2Fb/messages?x=1" -> {parts: ["topics", "a/b", "messages"], params} */
  function parseHash() {
    const raw = location.hash.replace(/^#\/?/, "");
    const [path, qs] = raw.split("?", 2);
    const parts = path.split("/").filter((p) => p !== "").map(decodeURIComponent);
    const params = new URLSearchParams(qs || "");
    return { parts: parts, params: params };
  }

  function route() {
    if (current) current.alive = false;
    current = null;
    showError(null);
    const root = document.getElementById("page");
    clear(root);
    if (session.secured && !session.principal) {
      showLogin();
      return;
    }
    const { parts, params } = parseHash();
    const [section, name, sub] = parts;
    renderNav(section || "overview");
    let page;
    if (section === "topics" && name && sub === "messages") page = messagesPage(name, params);
    else if (section === "topics" && name) page = topicPage(name);
    else if (section === "topics") page = topicsPage();
    else if (section === "groups" && name) page = groupPage(name);
    else if (section === "groups") page = groupsPage();
    else if (section === "aggregates") page = aggregatesPage(params);
    else if (section === "schemas") page = schemasPage(params);
    else if (section === "security") page = securityPage();
    else page = overviewPage();
    page.alive = true;
    current = page;
    root.appendChild(page.root);
    if (page.refresh) runRefresh(page);
  }

  /** Reloads a page's figures; a call while one runs makes it run once more after. */
  async function runRefresh(page, auto) {
    if (page.running) {
      if (!auto) page.again = true;
      return;
    }
    page.running = true;
    try {
      do {
        page.again = false;
        await page.refresh(!!auto);
        if (page.alive && page.live) {
          refreshCount++;
          const mark = document.getElementById("refreshed");
          mark.dataset.count = String(refreshCount);
          mark.textContent = "updated " + fmtTime(Date.now()).slice(11, 19);
        }
      } while (page.again && page.alive);
    } catch (err) {
      if (page.alive) showError(err);
    } finally {
      page.running = false;
    }
  }

  function tick() {
    if (document.hidden || !current || !current.live || !current.refresh) return;
    runRefresh(current, true);
  }

  /** A page object: root element, refresh() to (re)load its figures, live = refresh
   *  it every REFRESH_MS while shown. A late answer for a page no longer shown is dropped. */
  function page(name, live) {
    const root = el("section", { test: "page-" + name, class: "page-" + name });
    return { root: root, live: live, alive: false, refresh: null };
  }

  /** A paged, filtered list's controls: filter input, prev/next, "a–b of N". */
  function pager(listName, onChange) {
    const state = { offset: 0, limit: PAGE_SIZE, q: "", total: 0 };
    let timer = null;
    const filter = el("input", {
      type: "search",
      placeholder: "filter",
      test: listName + "-filter",
      on: {
        input: () => {
          clearTimeout(timer);
          timer = setTimeout(() => {
            state.q = filter.value.trim();
            state.offset = 0;
            onChange();
          }, 250);
        },
      },
    });
    const info = el("span", { class: "info", test: "pager-info" });
    const prev = el("button", {
      type: "button",
      class: "secondary small",
      test: "pager-prev",
      on: {
        click: () => {
          state.offset = Math.max(0, state.offset - state.limit);
          onChange();
        },
      },
    }, "‹ prev");
    const next = el("button", {
      type: "button",
      class: "secondary small",
      test: "pager-next",
      on: {
        click: () => {
          if (state.offset + state.limit < state.total) state.offset += state.limit;
          onChange();
        },
      },
    }, "next ›");
    const bar = el("div", { class: "pager" }, prev, info, next);
    function update(total, shown) {
      state.total = total;
      const first = shown ? state.offset + 1 : 0;
      info.textContent = first + "–" + (state.offset + shown) + " of " + total;
      prev.disabled = state.offset === 0;
      next.disabled = state.offset + state.limit >= total;
    }
    function params() {
      return { q: state.q, offset: state.offset, limit: state.limit };
    }
    return { state: state, filter: filter, bar: bar, update: update, params: params };
  }

  /** Paging of a list the API answers whole (a topic's partitions, a group's offsets):
   *  only 100 rows are built at a time, so a refresh stays cheap on big topics. */
  function slicePager(name, onChange) {
    const size = 100;
    let offset = 0;
    let total = 0;
    const info = el("span", { class: "info", test: name + "-info" });
    const prev = el("button", { type: "button", class: "secondary small", test: name + "-prev", on: { click: () => { offset = Math.max(0, offset - size); onChange(); } } }, "‹ prev");
    const next = el("button", { type: "button", class: "secondary small", test: name + "-next", on: { click: () => { if (offset + size < total) offset += size; onChange(); } } }, "next ›");
    const bar = el("div", { class: "pager", hidden: true }, prev, info, next);
    function slice(items) {
      total = items.length;
      if (offset >= total) offset = Math.max(0, Math.floor((total - 1) / size) * size);
      bar.hidden = total <= size;
      info.textContent = (total ? offset + 1 : 0) + "–" + Math.min(offset + size, total) + " of " + total;
      prev.disabled = offset === 0;
      next.disabled = offset + size >= total;
      return items.slice(offset, offset + size);
    }
    return { bar: bar, slice: slice };
  }

  /** Two-step destructive button: first click shows confirm/cancel. */
  function confirmButton(label, test, action) {
    const wrap = el("span", {});
    function initial() {
      replace(
        wrap,
        el("button", { type: "button", class: "danger small", test: test, on: { click: ask } }, label)
      );
    }
    function ask() {
      replace(
        wrap,
        el("button", {
          type: "button",
          class: "danger small",
          test: test + "-confirm",
          on: {
            click: async (e) => {
              e.target.disabled = true;
              try {
                await action();
              } catch (err) {
                showError(err);
                initial();
              }
            },
          },
        }, "Confirm " + label.toLowerCase()),
        " ",
        el("button", { type: "button", class: "secondary small", test: test + "-cancel", on: { click: initial } }, "Cancel")
      );
    }
    initial();
    return wrap;
  }

  // ---- login --------------------------------------------------------------------------

  function showLogin() {
    if (current) current.alive = false;
    current = null;
    renderWho();
    clear(document.getElementById("nav"));
    const root = clear(document.getElementById("page"));
    const user = el("input", { type: "text", autocomplete: "username", test: "login-username", required: true });
    const pass = el("input", { type: "password", autocomplete: "current-password", test: "login-password", required: true });
    const message = el("div", { class: "bad-text", test: "login-error" });
    const form = el(
      "form",
      {
        class: "login",
        test: "login-form",
        on: {
          submit: async (e) => {
            e.preventDefault();
            message.textContent = "";
            try {
              const doc = await api("POST", "login", { username: user.value, password: pass.value });
              session.principal = doc.principal;
              session.csrf = doc.csrf;
              pass.value = "";
              renderWho();
              route();
            } catch (err) {
              pass.value = "";
              message.textContent = err.status === 401 ? "Wrong user name or password." : err.message;
            }
          },
        },
      },
      el("h1", {}, "Sign in"),
      el("p", { class: "note" }, "This broker is secured: sign in with a SCRAM user."),
      field("User", user),
      field("Password", pass),
      message,
      el("button", { type: "submit", test: "login-submit" }, "Sign in")
    );
    root.appendChild(el("section", { test: "page-login" }, form));
    user.focus();
  }

  function renderWho() {
    const who = document.getElementById("who");
    document.getElementById("principal").textContent = session.principal || "";
    who.hidden = !(session.secured && session.principal);
  }

  async function logout() {
    try {
      await api("POST", "logout", {});
    } catch (err) {
      // The session may be gone already; signing in again is the way on.
    }
    session.principal = null;
    session.csrf = null;
    showLogin();
  }

  // ---- overview -----------------------------------------------------------------------

  function overviewPage() {
    const p = page("overview", true);
    const cards = el("div", { class: "cards" });
    const brokers = el("div", {});
    const problems = el("div", {});
    p.root.append(el("h1", {}, "Cluster overview"), cards, el("h2", {}, "Brokers"), brokers, problems);

    function card(label, test, value, cls) {
      return el(
        "div",
        { class: "card" },
        el("div", { class: "card-label" }, label),
        el("div", { class: "card-value " + (cls || ""), test: test }, value)
      );
    }

    function partitionList(test, title, items, count) {
      if (!count) return null;
      const rows = items.map((tp) =>
        el(
          "tr",
          { key: tp.topic + ":" + tp.partition },
          el("td", { col: "topic" }, link("#/topics/" + enc(tp.topic), tp.topic)),
          numCell("partition", tp.partition)
        )
      );
      const more = count > items.length ? el("p", { class: "note" }, "first " + items.length + " of " + count) : null;
      return [el("h2", {}, title), table(test, [["topic", "Topic"], ["partition", "Partition", true]], rows), more];
    }

    p.refresh = async () => {
      const o = await api("GET", "overview");
      if (!p.alive) return;
      replace(
        cards,
        card("Brokers", "stat-brokers", fmtNum(o.brokers.length)),
        card("Controller", "stat-controller", o.controller === null || o.controller < 0 ? "none" : String(o.controller)),
        card("Topics", "stat-topics", fmtNum(o.topics)),
        card("Partitions", "stat-partitions", fmtNum(o.partitions)),
        card("Under-replicated", "stat-under-replicated", fmtNum(o.under_replicated), o.under_replicated ? "bad" : "ok"),
        card("Offline", "stat-offline", fmtNum(o.offline), o.offline ? "bad" : "ok"),
        card("Cluster id", "cluster-id", o.cluster_id || "–", "small")
      );
      const rows = o.brokers.map((b) =>
        el(
          "tr",
          { key: b.id },
          numCell("id", b.id),
          cell("host", b.host + ":" + b.port, "mono"),
          cell("rack", b.rack || "–"),
          numCell("partitions", b.partitions),
          numCell("leaders", b.leaders),
          el("td", { col: "disk_bytes", class: "num", title: b.disk_bytes === null ? null : b.disk_bytes + " bytes" }, fmtBytes(b.disk_bytes)),
          cell("controller", b.id === o.controller ? "controller" : "")
        )
      );
      replace(
        brokers,
        table(
          "brokers-table",
          [
            ["id", "Id", true],
            ["host", "Endpoint"],
            ["rack", "Rack"],
            ["partitions", "Partitions", true],
            ["leaders", "Leaders", true],
            ["disk_bytes", "Disk", true],
            ["controller", ""],
          ],
          rows,
          "no brokers"
        )
      );
      replace(
        problems,
        partitionList("under-replicated-table", "Under-replicated partitions", o.under_replicated_partitions || [], o.under_replicated),
        partitionList("offline-table", "Offline partitions", o.offline_partitions || [], o.offline)
      );
    };
    return p;
  }

  // ---- topics -------------------------------------------------------------------------

  function topicsPage() {
    const p = page("topics", true);
    const list = el("div", {});
    const pg = pager("topic", () => runRefresh(p));
    const internal = el("input", { type: "checkbox", test: "topic-internal", on: { change: () => runRefresh(p) } });
    p.root.append(
      el("h1", {}, "Topics"),
      el("div", { class: "toolbar" }, pg.filter, el("label", { class: "field check" }, internal, "internal topics")),
      list,
      pg.bar,
      createTopicForm(() => runRefresh(p))
    );

    p.refresh = async () => {
      const doc = await api("GET", "topics" + query({ ...pg.params(), internal: internal.checked ? "true" : "false" }));
      if (!p.alive) return;
      const rows = doc.items.map((t) =>
        el(
          "tr",
          { key: t.name },
          el("td", { col: "name" }, link("#/topics/" + enc(t.name), t.name), t.internal ? el("span", { class: "tag" }, "internal") : null),
          numCell("partitions", t.partitions),
          numCell("replication_factor", t.replication_factor),
          el("td", { col: "size_bytes", class: "num", title: t.size_bytes === null ? null : t.size_bytes + " bytes" }, fmtBytes(t.size_bytes)),
          numCell("messages", t.messages),
          el("td", { col: "retention_ms", class: "num", title: t.retention_ms }, fmtMs(t.retention_ms)),
          el("td", { col: "messages_per_sec", class: "num" }, fmtRate(t.messages_per_sec)),
          el(
            "td",
            { col: "actions" },
            link("#/topics/" + enc(t.name) + "/messages", "messages"),
            " ",
            t.internal ? null : confirmButton("Delete", "topic-delete", async () => {
              await api("DELETE", "topics/" + enc(t.name));
              await runRefresh(p);
            })
          )
        )
      );
      replace(
        list,
        table(
          "topics-table",
          [
            ["name", "Name"],
            ["partitions", "Partitions", true],
            ["replication_factor", "Replicas", true],
            ["size_bytes", "Size", true],
            ["messages", "Messages", true],
            ["retention_ms", "Retention", true],
            ["messages_per_sec", "Msg/s", true],
            ["actions", ""],
          ],
          rows,
          pg.state.q ? "no topic matches" : "no topics"
        )
      );
      pg.update(doc.total, doc.items.length);
    };
    // A row's pending delete confirmation must not be wiped by the live refresh.
    const refresh = p.refresh;
    p.refresh = async (auto) => {
      if (auto && list.querySelector("[data-test=topic-delete-confirm]")) return;
      await refresh();
    };
    return p;
  }

  function createTopicForm(done) {
    const name = el("input", { type: "text", test: "topic-create-name", placeholder: "name", required: true });
    const partitions = el("input", { type: "number", min: 1, value: "1", test: "topic-create-partitions" });
    const rf = el("input", { type: "number", min: 1, value: "1", test: "topic-create-rf" });
    const configs = el("textarea", { test: "topic-create-configs", placeholder: "cleanup.policy=compact\nretention.ms=86400000" });
    const result = el("span", { class: "note", test: "topic-create-result" });
    const form = el(
      "form",
      {
        class: "panel",
        on: {
          submit: async (e) => {
            e.preventDefault();
            result.textContent = "";
            let parsed;
            try {
              parsed = parseProperties(configs.value);
            } catch (err) {
              showError(err);
              return;
            }
            try {
              const doc = await api("POST", "topics", {
                name: name.value.trim(),
                partitions: Number(partitions.value),
                replication_factor: Number(rf.value),
                configs: parsed,
              });
              showError(null);
              result.textContent = "created " + doc.name;
              name.value = "";
              configs.value = "";
              await done();
            } catch (err) {
              showError(err);
            }
          },
        },
      },
      el("h2", {}, "Create a topic"),
      el(
        "div",
        { class: "toolbar" },
        field("Name", name),
        field("Partitions", partitions),
        field("Replication factor", rf),
        field("Configs (key=value per line)", configs),
        el("button", { type: "submit", test: "topic-create-submit" }, "Create"),
        result
      )
    );
    return form;
  }

  function parseProperties(text) {
    const out = {};
    for (const raw of text.split("\n")) {
      const line = raw.trim();
      if (!line || line.startsWith("#")) continue;
      const at = line.indexOf("=");
      if (at <= 0) throw new Error("a config line must be key=value: " + line);
      out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
    }
    return out;
  }

  // ---- one topic ----------------------------------------------------------------------

  function topicPage(name) {
    const p = page("topic", true);
    const parts = el("div", {});
    const configs = el("div", {});
    let lastTopic = null;
    const partPager = slicePager("partitions", () => lastTopic && drawPartitions(lastTopic));
    let configItems = [];
    const configFilter = el("input", { type: "search", placeholder: "filter configs", test: "config-filter", on: { input: () => renderConfigs(configItems) } });
    const onlySet = el("input", { type: "checkbox", test: "config-only-set", on: { change: () => renderConfigs(configItems) } });
    p.root.append(
      el("div", { class: "crumbs" }, link("#/topics", "Topics"), " / "),
      el("div", { class: "title-row" }, el("h1", {}, name), el("a", { class: "button-link", href: "#/topics/" + enc(name) + "/messages", test: "topic-messages-link" }, "Browse messages")),
      el("h2", {}, "Partitions"),
      parts,
      partPager.bar,
      el("h2", {}, "Configs"),
      alterConfigForm(name, (doc) => renderConfigs(doc.configs)),
      el("div", { class: "toolbar" }, configFilter, el("label", { class: "field check" }, onlySet, "only those set on the topic")),
      configs
    );
    let configsShown = false;

    function renderConfigs(items) {
      configItems = items;
      const q = configFilter.value.trim();
      const shownItems = items.filter((c) => (!q || c.name.includes(q)) && (!onlySet.checked || c.source !== "DEFAULT_CONFIG"));
      const rows = shownItems.map((c) =>
        el(
          "tr",
          { key: c.name, class: c.source === "DEFAULT_CONFIG" ? null : "config-set" },
          cell("name", c.name, "mono"),
          cell("value", c.sensitive ? "(sensitive)" : c.value === null ? "–" : c.value, "mono wrap"),
          cell("source", c.source.toLowerCase().replace(/_config$/, "").replace(/_/g, " ")),
          cell("read_only", c.read_only ? "read-only" : "")
        )
      );
      replace(configs, table("configs-table", [["name", "Name"], ["value", "Value"], ["source", "Source"], ["read_only", ""]], rows, "no config matches"));
      configsShown = true;
    }

    function drawPartitions(t) {
      const list = (xs) => (xs && xs.length ? xs.join(", ") : "–");
      const rows = partPager.slice(t.partitions).map((q) =>
        el(
          "tr",
          { key: q.partition },
          numCell("partition", q.partition),
          numCell("leader", q.leader === null || q.leader < 0 ? "none" : q.leader),
          cell("replicas", list(q.replicas), "mono"),
          el("td", { col: "isr", class: "mono" + (q.isr.length < q.replicas.length ? " bad-text" : "") }, list(q.isr)),
          cell("offline_replicas", list(q.offline_replicas), "mono"),
          numCell("log_start_offset", q.log_start_offset),
          numCell("log_end_offset", q.log_end_offset),
          numCell("high_watermark", q.high_watermark)
        )
      );
      replace(
        parts,
        table(
          "partitions-table",
          [
            ["partition", "Partition", true],
            ["leader", "Leader", true],
            ["replicas", "Replicas"],
            ["isr", "ISR"],
            ["offline_replicas", "Offline"],
            ["log_start_offset", "Log start", true],
            ["log_end_offset", "Log end", true],
            ["high_watermark", "High watermark", true],
          ],
          rows
        )
      );
    }

    p.refresh = async () => {
      const t = await api("GET", "topics/" + enc(name));
      if (!p.alive) return;
      lastTopic = t;
      drawPartitions(t);
      // Configs change only when someone alters them: drawn once, then after each change.
      if (!configsShown) renderConfigs(t.configs || []);
    };
    return p;
  }

  function alterConfigForm(topic, done) {
    const key = el("input", { type: "text", test: "config-name", placeholder: "retention.ms" });
    const value = el("input", { type: "text", test: "config-value", placeholder: "value" });
    const result = el("span", { class: "note", test: "config-result" });
    async function send(body, what) {
      result.textContent = "";
      try {
        const doc = await api("PATCH", "topics/" + enc(topic) + "/configs", body);
        showError(null);
        result.textContent = what;
        done(doc);
      } catch (err) {
        showError(err);
      }
    }
    return el(
      "div",
      { class: "toolbar" },
      field("Config", key),
      field("Value", value),
      el("button", {
        type: "button",
        test: "config-set",
        on: { click: () => key.value.trim() && send({ set: { [key.value.trim()]: value.value }, delete: [] }, "set " + key.value.trim()) },
      }, "Set"),
      el("button", {
        type: "button",
        class: "secondary",
        test: "config-delete",
        on: { click: () => key.value.trim() && send({ set: {}, delete: [key.value.trim()] }, "reset " + key.value.trim() + " to its default") },
      }, "Reset to default"),
      result
    );
  }

  // ---- message browser ------------------------------------------------------------------

  function messagesPage(topic, params) {
    const p = page("messages", false);
    const partition = el("select", { test: "msg-partition" }, option("", "all", true));
    const from = selectOf(
      "msg-from",
      [["end", "the end"], ["beginning", "the beginning"], ["offset", "an offset"], ["timestamp", "a timestamp"]],
      params.get("from") || "end"
    );
    const offset = el("input", { type: "number", min: 0, test: "msg-offset", value: params.get("offset") || "0" });
    const timestamp = el("input", { type: "text", test: "msg-timestamp", placeholder: "ms or 2024-01-31T12:00", value: params.get("timestamp") || "" });
    const limit = el("input", { type: "number", min: 1, max: 500, test: "msg-limit", value: params.get("limit") || "50" });
    const key = el("input", { type: "text", test: "msg-key", placeholder: "exact key", value: params.get("key") || "" });
    const format = selectOf(
      "msg-format",
      [["auto", "as they are"], ["text", "text"], ["json", "JSON"], ["hex", "hex"], ["schema", "schema registry"]],
      params.get("format") || "auto"
    );
    const status = el("span", { class: "note", test: "msg-status" });
    const results = el("div", {});
    // Where "Next page" goes on: {partition, offset} after reading one partition,
    // {offsets: "P:N,..."} after reading all of them; null at the end.
    let goOn = null;
    const next = el("button", { type: "button", class: "secondary", test: "msg-next", disabled: true, on: { click: () => load(true) } }, "Next page ›");
    const offsetField = field("Offset", offset);
    const tsField = field("Timestamp", timestamp);
    function showFromFields() {
      offsetField.hidden = from.value !== "offset";
      tsField.hidden = from.value !== "timestamp";
    }
    from.addEventListener("change", showFromFields);
    showFromFields();

    const form = el(
      "form",
      { class: "toolbar", on: { submit: (e) => { e.preventDefault(); load(false); } } },
      field("Partition", partition),
      field("From", from),
      offsetField,
      tsField,
      field("Limit", limit),
      field("Key", key),
      field("Show values as", format),
      el("button", { type: "submit", test: "msg-load" }, "Load"),
      next
    );
    p.root.append(
      el("div", { class: "crumbs" }, link("#/topics", "Topics"), " / ", link("#/topics/" + enc(topic), topic), " / "),
      el("h1", {}, "Messages ", el("span", { class: "sub" }, topic)),
      form,
      status,
      results
    );

    function parseTimestamp(text) {
      const t = text.trim();
      if (/^\d+$/.test(t)) return Number(t);
      const ms = Date.parse(t);
      if (Number.isNaN(ms)) throw new Error("not a timestamp: " + t);
      return ms;
    }

    async function load(more) {
      let q;
      try {
        q = {
          partition: partition.value,
          from: from.value,
          limit: limit.value,
          key: key.value,
          format: format.value,
        };
        if (more) {
          if (!goOn) return;
          if (goOn.offsets !== undefined) {
            // Every partition on from its own offset (a partition added since: from the
            // beginning).
            q.partition = "";
            delete q.from;
            q.offsets = goOn.offsets;
          } else {
            q.partition = goOn.partition;
            q.from = "offset";
            q.offset = goOn.offset;
          }
        } else if (from.value === "offset") q.offset = offset.value;
        else if (from.value === "timestamp") q.timestamp = parseTimestamp(timestamp.value);
      } catch (err) {
        showError(err);
        return;
      }
      status.textContent = "loading…";
      try {
        const doc = await api("GET", "topics/" + enc(topic) + "/messages" + query(q));
        if (!p.alive) return;
        showError(null);
        // One partition goes on from next_offset; all of them from next_offsets, one
        // offset per partition, sent back as offsets=P:N,P:N. at_end: nothing more to
        // read now (a later "Load" shows records written since).
        const all = doc.next_offsets !== undefined && doc.next_offsets !== null;
        if (doc.at_end) goOn = null;
        else if (all) {
          goOn = { offsets: Object.entries(doc.next_offsets).map(([p, o]) => p + ":" + o).join(",") };
        } else if (doc.next_offset !== null && doc.next_offset !== undefined) {
          goOn = { partition: q.partition, offset: doc.next_offset };
        } else goOn = null;
        next.disabled = goOn === null;
        let where = "";
        if (!all && doc.next_offset !== null && doc.next_offset !== undefined && !doc.at_end) {
          where = " · next offset " + doc.next_offset;
        } else if (all && (doc.items.length || !doc.at_end)) {
          where = " · partitions go on at " + Object.entries(doc.next_offsets).map(([p, o]) => p + ": " + o).join(", ");
        }
        if (doc.at_end) where += " · at the end";
        status.textContent = doc.items.length + " record" + (doc.items.length === 1 ? "" : "s") + where;
        renderRecords(doc.items);
      } catch (err) {
        status.textContent = "";
        showError(err);
      }
    }

    function renderRecords(items) {
      const rows = items.map((r) =>
        el(
          "tr",
          { key: r.partition + ":" + r.offset },
          numCell("partition", r.partition),
          numCell("offset", r.offset),
          el("td", { col: "timestamp", class: "num", title: r.timestamp_type }, fmtTime(r.timestamp)),
          el(
            "td",
            { col: "key" },
            r.key_format === "hex" ? el("span", { class: "tag" }, "hex") : null,
            r.key === null ? el("span", { class: "note" }, "null") : el("pre", { class: "value" }, r.key)
          ),
          el(
            "td",
            { col: "value" },
            el("span", { class: "tag", test: "value-format" }, r.value_format + (r.schema_id !== null && r.schema_id !== undefined ? " #" + r.schema_id : "")),
            r.value === null ? el("span", { class: "note" }, "null") : el("pre", { class: "value" }, r.value)
          ),
          el(
            "td",
            { col: "headers" },
            (r.headers || []).map(headerLine)
          )
        )
      );
      replace(
        results,
        table(
          "messages-table",
          [
            ["partition", "Partition", true],
            ["offset", "Offset", true],
            ["timestamp", "Timestamp", true],
            ["key", "Key"],
            ["value", "Value"],
            ["headers", "Headers"],
          ],
          rows,
          "no records"
        )
      );
    }

    // The partition choice needs the topic's partition count.
    p.refresh = async () => {
      const t = await api("GET", "topics/" + enc(topic));
      if (!p.alive) return;
      const chosen = params.get("partition") || "";
      replace(partition, option("", "all", chosen === ""), t.partitions.map((q) => option(q.partition, String(q.partition), String(q.partition) === chosen)));
      await load(false);
    };
    return p;
  }

  // ---- consumer groups ------------------------------------------------------------------

  function groupsPage() {
    const p = page("groups", true);
    const list = el("div", {});
    const pg = pager("group", () => runRefresh(p));
    p.root.append(el("h1", {}, "Consumer groups"), el("div", { class: "toolbar" }, pg.filter), list, pg.bar);
    p.refresh = async () => {
      const doc = await api("GET", "groups" + query(pg.params()));
      if (!p.alive) return;
      const rows = doc.items.map((g) =>
        el(
          "tr",
          { key: g.group_id },
          el("td", { col: "group_id" }, link("#/groups/" + enc(g.group_id), g.group_id)),
          cell("state", g.state, "state-" + g.state),
          cell("protocol_type", g.protocol_type || "–"),
          numCell("members", g.members),
          el("td", { col: "lag", class: "num" + (g.lag ? " lag-high" : "") }, fmtNum(g.lag))
        )
      );
      replace(
        list,
        table(
          "groups-table",
          [["group_id", "Group"], ["state", "State"], ["protocol_type", "Type"], ["members", "Members", true], ["lag", "Lag", true]],
          rows,
          pg.state.q ? "no group matches" : "no groups"
        )
      );
      pg.update(doc.total, doc.items.length);
    };
    return p;
  }

  function groupPage(id) {
    const p = page("group", true);
    const cards = el("div", { class: "cards" });
    const members = el("div", {});
    const offsets = el("div", {});
    let lastGroup = null;
    const offsetPager = slicePager("offsets", () => lastGroup && drawOffsets(lastGroup));
    const reset = resetForm(id, () => runRefresh(p));
    p.root.append(
      el("div", { class: "crumbs" }, link("#/groups", "Consumer groups"), " / "),
      el("h1", {}, id),
      cards,
      el("h2", {}, "Members"),
      members,
      el("h2", {}, "Committed offsets and lag"),
      offsets,
      offsetPager.bar,
      reset.form,
      el(
        "div",
        { class: "panel" },
        el("h2", {}, "Delete the group"),
        el("p", { class: "note" }, "Only an empty group can be deleted; its committed offsets go with it."),
        confirmButton("Delete", "group-delete", async () => {
          await api("DELETE", "groups/" + enc(id));
          location.hash = "#/groups";
        })
      )
    );

    function card(label, test, value, cls) {
      return el("div", { class: "card" }, el("div", { class: "card-label" }, label), el("div", { class: "card-value " + (cls || ""), test: test }, value));
    }

    p.refresh = async () => {
      const g = await api("GET", "groups/" + enc(id));
      if (!p.alive) return;
      replace(
        cards,
        card("State", "group-state", g.state, "small state-" + g.state),
        card("Members", "group-members", fmtNum(g.members.length)),
        card("Total lag", "group-total-lag", fmtNum(g.total_lag), g.total_lag ? "bad" : "ok"),
        card("Coordinator", "group-coordinator", fmtNum(g.coordinator)),
        card("Protocol", "group-protocol", (g.protocol_type || "–") + (g.protocol ? " / " + g.protocol : ""), "small")
      );
      const memberRows = g.members.map((m) =>
        el(
          "tr",
          { key: m.member_id },
          cell("member_id", m.member_id, "mono"),
          cell("client_id", m.client_id),
          cell("host", m.host, "mono"),
          el(
            "td",
            { col: "assignment" },
            m.assignment.slice(0, 24).map((a) => el("span", { class: "tag" }, a.topic + "-" + a.partition)),
            m.assignment.length > 24 ? el("span", { class: "note" }, "and " + (m.assignment.length - 24) + " more") : null
          )
        )
      );
      replace(members, table("members-table", [["member_id", "Member"], ["client_id", "Client"], ["host", "Host"], ["assignment", "Assignment"]], memberRows, "no members"));
      lastGroup = g;
      drawOffsets(g);
      reset.topics([...new Set(g.offsets.map((o) => o.topic))].sort());
    };

    function drawOffsets(g) {
      const offsetRows = offsetPager.slice(g.offsets).map((o) =>
        el(
          "tr",
          { key: o.topic + ":" + o.partition },
          el("td", { col: "topic" }, link("#/topics/" + enc(o.topic), o.topic)),
          numCell("partition", o.partition),
          numCell("committed", o.committed),
          numCell("log_end_offset", o.log_end_offset),
          el("td", { col: "lag", class: "num" + (o.lag ? " lag-high" : "") }, fmtNum(o.lag)),
          cell("member_id", o.member_id || "–", "mono")
        )
      );
      replace(
        offsets,
        table(
          "offsets-table",
          [["topic", "Topic"], ["partition", "Partition", true], ["committed", "Committed", true], ["log_end_offset", "Log end", true], ["lag", "Lag", true], ["member_id", "Member"]],
          offsetRows,
          "no committed offsets"
        )
      );
    }
    return p;
  }

  /** Reset offsets: a dry run shows the plan; Apply sends the same request for real. */
  function resetForm(group, done) {
    const topic = el("select", { test: "reset-topic" });
    const partitions = el("input", { type: "text", test: "reset-partitions", placeholder: "all, or 0,2,5" });
    const to = selectOf(
      "reset-to",
      [["earliest", "earliest"], ["latest", "latest"], ["offset", "offset"], ["timestamp", "timestamp (ms)"], ["shift", "shift by"]],
      "earliest"
    );
    const value = el("input", { type: "text", test: "reset-value", placeholder: "n" });
    const valueField = field("Value", value);
    const result = el("div", { test: "reset-result" });
    const apply = el("button", { type: "button", class: "danger", test: "reset-apply", disabled: true, on: { click: () => send(false) } }, "Apply");
    let planned = null;
    function showValue() {
      valueField.hidden = !["offset", "timestamp", "shift"].includes(to.value);
    }
    function invalidate() {
      planned = null;
      apply.disabled = true;
    }
    to.addEventListener("change", () => { showValue(); invalidate(); });
    for (const input of [topic, partitions, value]) input.addEventListener("input", invalidate);
    topic.addEventListener("change", invalidate);
    showValue();

    function request(dryRun) {
      const parts = partitions.value.trim();
      const list = parts
        ? parts.split(",").map((s) => {
            const n = Number(s.trim());
            if (!Number.isInteger(n) || n < 0) throw new Error("partitions: numbers separated by commas");
            return n;
          })
        : null;
      let v = null;
      if (!valueField.hidden) {
        v = Number(value.value.trim());
        if (!value.value.trim() || !Number.isInteger(v)) throw new Error("the value must be a whole number");
      }
      return { topic: topic.value, partitions: list, to: to.value, value: v, dry_run: dryRun };
    }

    async function send(dryRun) {
      let body;
      try {
        body = dryRun ? request(true) : { ...planned, dry_run: false };
      } catch (err) {
        showError(err);
        return;
      }
      try {
        const doc = await api("POST", "groups/" + enc(group) + "/reset-offsets", body);
        showError(null);
        const rows = doc.offsets.map((o) =>
          el("tr", { key: o.topic + ":" + o.partition }, cell("topic", o.topic), numCell("partition", o.partition), numCell("from", o.from), numCell("to", o.to))
        );
        replace(
          result,
          el("p", { class: doc.applied ? "ok-text" : "note", test: "reset-status" }, doc.applied ? "Applied." : "Dry run: nothing changed yet. Apply to commit these offsets."),
          table("reset-table", [["topic", "Topic"], ["partition", "Partition", true], ["from", "From", true], ["to", "To", true]], rows, "nothing to reset")
        );
        if (dryRun) {
          planned = body;
          apply.disabled = false;
        } else {
          invalidate();
          await done();
        }
      } catch (err) {
        showError(err);
        invalidate();
      }
    }

    const form = el(
      "div",
      { class: "panel" },
      el("h2", {}, "Reset offsets"),
      el("p", { class: "note" }, "The group must have no active members. A dry run shows the new offsets; Apply commits them."),
      el(
        "div",
        { class: "toolbar" },
        field("Topic", topic),
        field("Partitions", partitions),
        field("To", to),
        valueField,
        el("button", { type: "button", class: "secondary", test: "reset-dry-run", on: { click: () => send(true) } }, "Dry run"),
        apply
      ),
      result
    );
    function topics(names) {
      const chosen = topic.value;
      const have = Array.from(topic.options).map((o) => o.value);
      if (have.length === names.length && have.every((n, i) => n === names[i])) return;
      replace(topic, names.map((n) => option(n, n, n === chosen)));
    }
    return { form: form, topics: topics };
  }

  // ---- aggregates ---------------------------------------------------------------------

  function aggregatesPage(params) {
    const p = page("aggregates", false);
    const topic = el("input", { type: "text", test: "agg-topic", placeholder: "topic", list: "agg-topics", value: params.get("topic") || "" });
    const topics = el("datalist", { id: "agg-topics" });
    const key = el("input", { type: "text", test: "agg-key", placeholder: "aggregate key", value: params.get("key") || "" });
    const summary = el("div", { class: "cards" });
    const events = el("div", {});
    const expected = el("input", { type: "number", min: 0, test: "agg-expected" });
    const value = el("textarea", { test: "agg-value", placeholder: '{"type": "Deposited", "amount": 10}' });
    const result = el("div", { test: "agg-result", class: "note" });
    const appendPanel = el(
      "form",
      { class: "panel", hidden: true, on: { submit: (e) => { e.preventDefault(); appendEvent(); } } },
      el("h2", {}, "Append an event"),
      el("p", { class: "note" }, "Written only if the aggregate is still at the expected version. One event per line."),
      el("div", { class: "toolbar" }, field("Expected version", expected), field("Event value (text or JSON)", value), el("button", { type: "submit", test: "agg-append" }, "Append")),
      result
    );
    let shown = null;

    p.root.append(
      el("h1", {}, "Aggregates"),
      el("p", { class: "note" }, "An event-store topic's events for one key, by version."),
      el(
        "form",
        { class: "toolbar", on: { submit: (e) => { e.preventDefault(); load(0); } } },
        field("Topic", topic),
        topics,
        field("Key", key),
        el("button", { type: "submit", test: "agg-load" }, "Show")
      ),
      summary,
      events,
      appendPanel
    );

    const more = el("button", { type: "button", class: "secondary", test: "agg-more", hidden: true }, "Later events ›");
    let fromVersion = 0;
    more.addEventListener("click", () => load(fromVersion));

    /** Shows the key's events from version ``from`` (0: the first page). */
    async function load(from) {
      const t = topic.value.trim();
      const k = key.value;
      if (!t || !k) {
        showError(new Error("enter a topic and a key"));
        return;
      }
      try {
        const doc = await api("GET", "aggregates/" + enc(t) + "/" + enc(k) + query({ from_version: from || 0, limit: 100 }));
        if (!p.alive) return;
        showError(null);
        shown = { topic: t, key: k };
        fromVersion = doc.next_version;
        more.hidden = doc.next_version === null || doc.next_version === undefined;
        const card = (label, test, v) => el("div", { class: "card" }, el("div", { class: "card-label" }, label), el("div", { class: "card-value", test: test }, v));
        replace(summary, card("Versions", "agg-version-count", fmtNum(doc.version_count)), card("Partition", "agg-partition", fmtNum(doc.partition)));
        const rows = doc.events.map((ev) =>
          el(
            "tr",
            { key: ev.version },
            numCell("version", ev.version),
            numCell("offset", ev.offset),
            el("td", { col: "timestamp", class: "num" }, fmtTime(ev.timestamp)),
            el("td", { col: "value" }, el("span", { class: "tag" }, ev.value_format), ev.value === null ? el("span", { class: "note" }, "null") : el("pre", { class: "value" }, ev.value)),
            el("td", { col: "headers" }, (ev.headers || []).map(headerLine))
          )
        );
        const range = doc.events.length < doc.version_count && doc.events.length
          ? el("p", { class: "note" }, "versions " + doc.events[0].version + "–" + doc.events[doc.events.length - 1].version + " of " + doc.version_count)
          : null;
        replace(
          events,
          table("events-table", [["version", "Version", true], ["offset", "Offset", true], ["timestamp", "Timestamp", true], ["value", "Value"], ["headers", "Headers"]], rows, "no events for this key yet"),
          el("div", { class: "pager" }, range, more)
        );
        expected.value = String(doc.version_count);
        appendPanel.hidden = false;
      } catch (err) {
        showError(err);
      }
    }

    async function appendEvent() {
      if (!shown) return;
      const lines = value.value.split("\n").map((s) => s.trim()).filter((s) => s);
      if (!lines.length) {
        showError(new Error("enter an event value"));
        return;
      }
      try {
        const doc = await api("POST", "aggregates/" + enc(shown.topic) + "/" + enc(shown.key), {
          expected_version: Number(expected.value),
          events: lines.map((v) => ({ value: v })),
        });
        showError(null);
        value.value = "";
        result.textContent = "appended versions " + doc.first_version + "–" + doc.last_version;
        // The page that holds the new events.
        await load(Math.max(0, doc.last_version + 1 - 100));
      } catch (err) {
        if (err.code === "version_conflict") {
          result.textContent = "";
          showError(new Error("version conflict: the aggregate is at version " + err.body.current_version + ", not " + expected.value));
        } else showError(err);
      }
    }

    p.refresh = async () => {
      try {
        const doc = await api("GET", "topics" + query({ limit: 500 }));
        if (!p.alive) return;
        replace(topics, doc.items.map((t) => option(t.name, t.name)));
      } catch (err) {
        // The topic names are only a convenience.
      }
      if (topic.value && key.value) await load(0);
    };
    return p;
  }

  // ---- schemas ------------------------------------------------------------------------

  function schemasPage(params) {
    const p = page("schemas", false);
    const list = el("div", {});
    const detail = el("div", {});
    const pg = pager("schema", () => runRefresh(p));
    p.root.append(el("h1", {}, "Schemas"), el("div", { class: "toolbar" }, pg.filter), list, pg.bar, detail);

    p.refresh = async () => {
      let doc;
      try {
        doc = await api("GET", "schemas" + query(pg.params()));
      } catch (err) {
        if (err.code === "no_registry") {
          replace(list, el("p", { class: "note", test: "no-registry" }, "This broker has no schema registry."));
          return;
        }
        throw err;
      }
      if (!p.alive) return;
      const rows = doc.items.map((s) =>
        el(
          "tr",
          { key: s.subject },
          el("td", { col: "subject" }, link("#/schemas?subject=" + enc(s.subject), s.subject)),
          cell("versions", s.versions.join(", "), "mono"),
          numCell("latest_id", s.latest_id),
          cell("type", s.type),
          cell("compatibility", s.compatibility)
        )
      );
      replace(
        list,
        table("schemas-table", [["subject", "Subject"], ["versions", "Versions"], ["latest_id", "Latest id", true], ["type", "Type"], ["compatibility", "Compatibility"]], rows, "no subjects")
      );
      pg.update(doc.total, doc.items.length);
      const subject = params.get("subject");
      if (!subject || detail.dataset.subject === subject) return;
      let found = doc.items.find((s) => s.subject === subject);
      if (!found) {
        // Not on this page of the list: looked up by name.
        const named = await api("GET", "schemas" + query({ q: subject, limit: 500 }));
        found = named.items.find((s) => s.subject === subject);
      }
      if (found && p.alive) {
        detail.dataset.subject = subject;
        await showSubject(found);
      }
    };

    async function showSubject(s) {
      const versions = s.versions.map((v) => [v, "v" + v]);
      const latest = s.versions[s.versions.length - 1];
      const version = selectOf("schema-version", versions, latest);
      const text = el("pre", { class: "value panel", test: "schema-text" });
      const from = selectOf("schema-diff-from", versions, s.versions.length > 1 ? s.versions[s.versions.length - 2] : latest);
      const to = selectOf("schema-diff-to", versions, latest);
      const diff = el("div", { class: "diff panel", test: "schema-diff" });
      const compat = el("span", { test: "schema-compat", class: "mono" }, s.compatibility);
      const base = "schemas/" + enc(s.subject);
      async function showVersion() {
        try {
          const doc = await api("GET", base + "/versions/" + enc(version.value));
          text.textContent = doc.schema;
          idLine.textContent = "id " + doc.id + " · " + doc.type;
        } catch (err) {
          showError(err);
        }
      }
      async function showDiff() {
        try {
          const doc = await api("GET", base + "/diff" + query({ from: from.value, to: to.value }));
          replace(diff, doc.lines.map((l) => el("div", { class: l.op === "+" ? "add" : l.op === "-" ? "del" : null }, l.op + " " + l.text)));
        } catch (err) {
          showError(err);
        }
      }
      const idLine = el("span", { class: "note" });
      version.addEventListener("change", showVersion);
      from.addEventListener("change", showDiff);
      to.addEventListener("change", showDiff);
      replace(
        detail,
        el("h2", { test: "schema-subject" }, s.subject),
        el("p", {}, "Compatibility: ", compat),
        el("div", { class: "split" },
          el("div", {}, el("div", { class: "toolbar" }, field("Version", version), idLine), text),
          el("div", {}, el("div", { class: "toolbar" }, field("Diff from", from), field("to", to)), diff))
      );
      await Promise.all([showVersion(), showDiff()]);
      try {
        const c = await api("GET", base + "/compatibility");
        compat.textContent = c.compatibility;
      } catch (err) {
        // The list's value stays.
      }
    }
    return p;
  }

  // ---- security -----------------------------------------------------------------------

  function securityPage() {
    const p = page("security", false);
    if (!session.secured) {
      p.root.append(el("h1", {}, "Security"), el("p", { class: "note", test: "security-off" }, "Security is off on this broker: no users, no ACLs."));
      return p;
    }
    const principal = el("input", { type: "text", test: "acl-principal", placeholder: "User:alice" });
    const resourceType = selectOf(
      "acl-resource-type",
      [["", "any"], ["TOPIC", "topic"], ["GROUP", "group"], ["CLUSTER", "cluster"], ["TRANSACTIONAL_ID", "transactional id"], ["DELEGATION_TOKEN", "delegation token"]],
      ""
    );
    const acls = el("div", {});
    const users = el("div", {});
    p.root.append(
      el("h1", {}, "Security"),
      el("h2", {}, "ACLs"),
      el("form", { class: "toolbar", on: { submit: (e) => { e.preventDefault(); loadAcls(); } } }, field("Principal", principal), field("Resource type", resourceType), el("button", { type: "submit", test: "acl-load" }, "Filter")),
      acls,
      el("h2", {}, "SCRAM users"),
      users
    );

    async function loadAcls() {
      try {
        const doc = await api("GET", "acls" + query({ principal: principal.value.trim(), resource_type: resourceType.value }));
        const rows = doc.items.map((a, i) =>
          el(
            "tr",
            { key: i },
            cell("principal", a.principal, "mono"),
            cell("host", a.host, "mono"),
            cell("operation", a.operation),
            cell("permission", a.permission, a.permission === "DENY" ? "bad-text" : null),
            cell("resource_type", a.resource_type),
            cell("resource_name", a.resource_name, "mono"),
            cell("pattern_type", a.pattern_type)
          )
        );
        replace(
          acls,
          table(
            "acls-table",
            [["principal", "Principal"], ["host", "Host"], ["operation", "Operation"], ["permission", "Permission"], ["resource_type", "Resource"], ["resource_name", "Name"], ["pattern_type", "Pattern"]],
            rows,
            "no ACLs"
          )
        );
      } catch (err) {
        replace(acls, el("p", { class: "note", test: "acls-denied" }, err.status === 403 ? "Not allowed: describing ACLs needs DESCRIBE on the cluster." : err.message));
      }
    }

    async function loadUsers() {
      try {
        const doc = await api("GET", "users");
        const rows = doc.items.map((u) =>
          el("tr", { key: u.user }, cell("user", u.user, "mono"), el("td", { col: "mechanisms" }, u.mechanisms.map((m) => el("span", { class: "tag" }, m.mechanism + " × " + m.iterations))))
        );
        replace(users, table("users-table", [["user", "User"], ["mechanisms", "Mechanisms"]], rows, "no users"));
      } catch (err) {
        replace(users, el("p", { class: "note", test: "users-denied" }, err.status === 403 ? "Not allowed: listing users needs DESCRIBE on the cluster." : err.message));
      }
    }

    p.refresh = async () => {
      await Promise.all([loadAcls(), loadUsers()]);
    };
    return p;
  }

  // ---- start --------------------------------------------------------------------------

  async function start() {
    document.getElementById("logout").addEventListener("click", logout);
    try {
      const s = await api("GET", "session");
      session.secured = !!s.secured;
      session.principal = s.principal;
      session.csrf = s.csrf;
    } catch (err) {
      showError(err);
      return;
    }
    renderWho();
    window.addEventListener("hashchange", route);
    if (!location.hash) history.replaceState(null, "", "#/overview");
    route();
    setInterval(tick, REFRESH_MS);
    document.addEventListener("visibilitychange", tick);
  }

  start();
})();
