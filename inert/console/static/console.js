// The inert console's only script: ages that count up, and the ledger kept live by server-sent
// events. Every value is set as text (textContent), never as markup, and arrives as the page
// shows it: each id escaped by the server as the page's own cells are.
"use strict";

(function () {
  const body = document.body;
  const base = body.dataset.base || "";
  // The log's clock and this browser's may differ: ages count from the page's own "now".
  const skew = Number(body.dataset.now) - Date.now();

  function age(milliseconds) {
    let seconds = Math.max(milliseconds / 1000, 0);
    if (seconds < 60) return seconds.toFixed(1) + " s";
    seconds = Math.floor(seconds);
    let minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + " min " + (seconds % 60) + " s";
    let hours = Math.floor(minutes / 60);
    if (hours < 24) return hours + " h " + (minutes % 60) + " min";
    return Math.floor(hours / 24) + " d " + (hours % 24) + " h";
  }

  function tick() {
    const now = Date.now() + skew;
    for (const cell of document.querySelectorAll("[data-first]")) {
      cell.textContent = age(now - Number(cell.dataset.first));
    }
  }
  setInterval(tick, 1000);

  const live = document.getElementById("live");
  const table = document.getElementById("ledger");
  if (!live || !table) return;
  const tbody = table.tBodies[0];
  const pageSize = Number(live.dataset.pageSize);
  const firstPage = live.dataset.firstPage === "yes";
  const stageClass = (stage) => "stage stage-" + stage.replace(/ /g, "-");

  function cell(name, className) {
    const td = document.createElement("td");
    td.dataset.col = name;
    if (className) td.className = className;
    return td;
  }

  function newRow(row) {
    const tr = document.createElement("tr");
    tr.dataset.id = row.id;
    tr.append(
      cell("stage"), cell("state"), cell("tenant", "id"), cell("turn", "id"), cell("tool", "id"),
      cell("call"), cell("fragments", "num"), cell("bytes", "num"), cell("reasons", "reason"),
      cell("first_seen"), cell("changed_at"), cell("age", "num"),
    );
    return tr;
  }

  function fill(tr, row) {
    tr.dataset.stage = row.stage;
    const cells = {};
    for (const td of tr.cells) cells[td.dataset.col] = td;
    const stage = document.createElement("span");
    stage.className = stageClass(row.stage);
    stage.title = "state " + row.state;
    const mark = document.createElement("span");
    mark.className = "mark";
    mark.setAttribute("aria-hidden", "true");
    mark.textContent = row.mark;
    stage.append(mark, " " + row.stage);
    cells.stage.replaceChildren(stage);
    const link = document.createElement("a");
    link.href = base + "/calls/" + encodeURIComponent(row.id);
    link.className = "id";
    link.textContent = row.call;
    cells.call.replaceChildren(link);
    for (const name of ["state", "tenant", "turn", "tool", "fragments", "bytes", "reasons",
                        "first_seen", "changed_at"]) {
      cells[name].textContent = String(row[name]);
    }
    cells.age.dataset.first = String(row.first_ms);
    cells.age.textContent = row.age;
    tr.classList.remove("fresh");
    void tr.offsetWidth;
    tr.classList.add("fresh");
  }

  function apply(rows) {
    // The one changed last comes first: put the others above it in reverse.
    for (const row of rows.slice().reverse()) {
      let tr = tbody.querySelector('tr[data-id="' + CSS.escape(row.id) + '"]');
      if (!tr) {
        if (!firstPage) continue;
        tr = newRow(row);
        const empty = document.getElementById("no-calls");
        if (empty) empty.remove();
      }
      fill(tr, row);
      if (firstPage) tbody.prepend(tr);
    }
    while (firstPage && tbody.rows.length > pageSize) tbody.lastElementChild.remove();
  }

  const source = new EventSource(base + "/live?" + live.dataset.query);
  source.addEventListener("hello", () => {
    live.textContent = "live";
    live.classList.add("on");
  });
  function count(message) {
    // How many calls the filters keep now, and which of them this page shows.
    const total = document.getElementById("total");
    if (total) total.textContent = String(message.total);
    const position = document.getElementById("position");
    if (position) position.textContent = String(message.position);
    if (!firstPage) return;
    const first = document.getElementById("range-first");
    const last = document.getElementById("range-last");
    if (first) first.textContent = String(tbody.rows.length ? 1 : 0);
    if (last) last.textContent = String(tbody.rows.length);
  }

  source.addEventListener("rows", (event) => {
    const message = JSON.parse(event.data);
    apply(message.rows);
    count(message);
  });
  source.onerror = () => {
    live.textContent = "reconnecting…";
    live.classList.remove("on");
  };
})();
