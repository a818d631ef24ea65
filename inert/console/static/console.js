// The inert console's only script: ages that count up, times shown in UTC or in the browser's
// time zone, the ledger kept live by server-sent events, and the waiting and running page drawn
// again when calls enter or leave its stages. Every value is set as text (textContent), never
// as markup, and arrives as the page shows it: each id escaped by the server as the page's own
// cells are. Without the script every page reads right, its times in UTC.
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

  // Times: each <time> holds its UTC moment in ISO 8601; the switch shows them in this
  // browser's time zone instead (with its offset), and the choice is kept for the next page.
  const zone = document.getElementById("time-zone");
  const ZONE_KEY = "inert.console.times";
  let localTimes = false;
  try {
    localTimes = window.localStorage.getItem(ZONE_KEY) === "local";
  } catch (error) {
    localTimes = false;
  }
  const two = (number) => String(number).padStart(2, "0");

  function offsetText(date) {
    const minutes = -date.getTimezoneOffset();
    const sign = minutes < 0 ? "-" : "+";
    const whole = Math.abs(minutes);
    return sign + two(Math.floor(whole / 60)) + ":" + two(whole % 60);
  }

  function localText(utc) {
    const date = new Date(utc);
    if (Number.isNaN(date.getTime())) return utc;
    return date.getFullYear() + "-" + two(date.getMonth() + 1) + "-" + two(date.getDate()) +
      "T" + two(date.getHours()) + ":" + two(date.getMinutes()) + ":" +
      two(date.getSeconds()) + offsetText(date);
  }

  function showTimes(root) {
    for (const time of root.querySelectorAll("time[datetime]")) {
      const utc = time.getAttribute("datetime");
      time.textContent = localTimes ? localText(utc) : utc;
      time.title = localTimes ? utc : localText(utc);
    }
  }

  function timeElement(utc) {
    const time = document.createElement("time");
    time.setAttribute("datetime", utc);
    time.textContent = localTimes ? localText(utc) : utc;
    return time;
  }

  if (zone) {
    const label = () => {
      zone.textContent = localTimes ? "times in local time, UTC" + offsetText(new Date()) : "times in UTC";
      zone.setAttribute("aria-pressed", localTimes ? "true" : "false");
    };
    zone.hidden = false;
    label();
    zone.addEventListener("click", () => {
      localTimes = !localTimes;
      try {
        window.localStorage.setItem(ZONE_KEY, localTimes ? "local" : "utc");
      } catch (error) {
        // Not kept (storage refused): this page still switches.
      }
      label();
      showTimes(document);
    });
  }
  showTimes(document);

  const waiting = document.getElementById("live-waiting");
  if (waiting) watchWaiting(waiting);

  function watchWaiting(status) {
    // The lists are in the order calls entered their stages, and paged: the page is drawn
    // again by the server, at most once a second, and its lists put in place of these.
    const sections = document.getElementById("sections");
    let drawing = false;
    let again = false;
    async function redraw() {
      if (drawing) {
        again = true;
        return;
      }
      drawing = true;
      try {
        const response = await fetch(window.location.href, { credentials: "same-origin" });
        if (response.ok) {
          const drawn = new DOMParser().parseFromString(await response.text(), "text/html");
          const fresh = drawn.getElementById("sections");
          if (fresh) {
            sections.replaceChildren(...Array.from(fresh.childNodes, (node) => document.importNode(node, true)));
            showTimes(sections);
            tick();
          }
        }
      } finally {
        setTimeout(() => {
          drawing = false;
          if (again) {
            again = false;
            redraw();
          }
        }, 1000);
      }
    }
    const source = new EventSource(base + "/live/waiting?after=" + encodeURIComponent(status.dataset.after));
    source.addEventListener("hello", () => {
      status.textContent = "live";
      status.classList.add("on");
    });
    source.addEventListener("changed", (event) => {
      const position = document.getElementById("position");
      if (position) position.textContent = String(JSON.parse(event.data).position);
      redraw();
    });
    source.onerror = () => {
      status.textContent = "reconnecting…";
      status.classList.remove("on");
    };
  }

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
      cell("stage"), cell("state"), cell("tenant", "id"), cell("conversation", "id"),
      cell("turn", "id"), cell("tool", "id"),
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
    for (const name of ["state", "tenant", "conversation", "turn", "tool", "fragments", "bytes",
                        "reasons"]) {
      cells[name].textContent = String(row[name]);
    }
    for (const name of ["first_seen", "changed_at"]) {
      cells[name].replaceChildren(timeElement(row[name]));
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
