// Queue: your place in the queue, the workers and the queue depths (refreshed every 3 s).

import { api } from "./api.js";
import { errorBox, fmtDuration, fmtTime, h, keyedChildren, refill, statusBadge } from "./util.js";

export function render(main) {
  // built once, refreshed in place: a link rebuilt under the pointer every 3 s lost the click
  const message = h("div");
  const queues = h("tbody");
  const jobs = h("tbody");
  const jobsTable = h("div.scroll", h("table.list#my-jobs", h("thead", h("tr", h("th", "job"), h("th", "status"),
    h("th", "queue"), h("th", "position"), h("th", "priority"), h("th", "start (estimate)"))), jobs));
  const none = h("p.muted", "Nothing of yours is queued or running.");
  const content = h("div", { hidden: true },   // until the first answer, and hidden again while the last refused
    h("div.scroll", h("table.list#queues", h("thead", h("tr", h("th", "queue"), h("th", "queued"),
      h("th", { title: "jobs running: each child of a fused batch counts" }, "running"),
      // processes, not workers: a worker's pool of N processes holds jobs under one name, and busy and up were
      // told in those two units (a pool counted once among the busy, each of its processes among those up)
      h("th", { title: "worker processes serving this queue: running a job or a fused batch, of those up" },
        "processes busy / up"),
      h("th", "mean run time"))), queues)),
    h("p.muted", "running counts jobs, each child of a fused batch included (a process runs a fused batch as "
      + "one); processes: those running a job, of every worker process serving the queue (none up: a job queued "
      + "there waits for one to start). "
      + "A start estimate: each slot frees when its job should end (at its pace, once it has done a tenth of its "
      + "steps; else at the mean run time), then each job ahead takes the mean run time."),
    // in its own scroller, as the queues' table: at 420 px a wide table scrolls, not the page
    h("h2", "Your queued and running jobs"), jobsTable, none);
  main.append(h("h1", "Queue"), message, content);
  let timer;
  async function load() {
    try {
      const q = await api("/v1/queue");
      message.replaceChildren();
      content.hidden = false;
      const cells = ([name, info]) => [name, info.queued, info.running, `${info.busy_processes} / ${info.processes}`,
        fmtDuration(info.mean_duration_seconds)];
      keyedChildren(queues, Object.entries(q.queues), ([name]) => name, cells, (entry) => {
        const [name, queued, running, processes, mean] = cells(entry);
        return h("tr", h("td", name), h("td", queued), h("td", running), h("td.processes", processes), h("td", mean));
      });
      // a job's row: its link built with it, the rest (a start estimate moves at every refresh) updated in place
      keyedChildren(jobs, q.jobs, (j) => j.id, (j) => j.name,
        (j) => h("tr", h("td", h("a", { href: `#/experiments/${j.id}` }, j.name || j.id.slice(0, 12))),
          h("td"), h("td"), h("td"), h("td"), h("td")),
        (tr, j) => {
          const [, status, queue, position, priority, start] = tr.children;
          refill(status, j.status, () => statusBadge(j.status));
          queue.textContent = j.queue;
          position.textContent = j.position ?? "";
          priority.textContent = j.priority;
          start.textContent = fmtTime(j.estimated_start);
        });
      jobsTable.hidden = !q.jobs.length;
      none.hidden = Boolean(q.jobs.length);
    } catch (error) {
      message.replaceChildren(errorBox(error));
      content.hidden = true;   // its rows would look current
    }
    timer = setTimeout(load, 3000);
  }
  load();
  return () => clearTimeout(timer);
}
