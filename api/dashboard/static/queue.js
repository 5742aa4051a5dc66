// Queue: your place in the queue, the workers and the queue depths (refreshed every 3 s).

import { api } from "./api.js";
import { errorBox, fmtDuration, fmtTime, h, statusBadge } from "./util.js";

export function render(main) {
  const body = h("div");
  main.append(h("h1", "Queue"), body);
  let timer;
  async function load() {
    try {
      const q = await api("/v1/queue");
      body.replaceChildren(
        h("div.scroll", h("table.list#queues", h("tr", h("th", "queue"), h("th", "queued"),
          h("th", { title: "jobs running: each child of a fused batch counts" }, "running"),
          // processes, not workers: a worker's pool of N processes holds jobs under one name, and busy and up were
          // told in those two units (a pool counted once among the busy, each of its processes among those up)
          h("th", { title: "worker processes serving this queue: running a job or a fused batch, of those up" },
            "processes busy / up"),
          h("th", "mean run time")),
        Object.entries(q.queues).map(([name, info]) => h("tr", h("td", name), h("td", info.queued), h("td", info.running),
          h("td.processes", `${info.busy_processes} / ${info.processes}`),
          h("td", fmtDuration(info.mean_duration_seconds)))))),
        h("p.muted", "running counts jobs, each child of a fused batch included (a process runs a fused batch as "
          + "one); processes: those running a job, of every worker process serving the queue (none up: a job queued "
          + "there waits for one to start). "
          + "A start estimate: each slot frees when its job should end (at its pace, once it has done a tenth of its "
          + "steps; else at the mean run time), then each job ahead takes the mean run time."),
        h("h2", "Your queued and running jobs"),
        // in its own scroller, as the queues' table: at 420 px a wide table scrolls, not the page
        q.jobs.length ? h("div.scroll", h("table.list#my-jobs", h("tr", h("th", "job"), h("th", "status"),
          h("th", "queue"), h("th", "position"), h("th", "priority"), h("th", "start (estimate)")),
        q.jobs.map((j) => h("tr", h("td", h("a", { href: `#/experiments/${j.id}` }, j.name || j.id.slice(0, 12))),
          h("td", statusBadge(j.status)), h("td", j.queue), h("td", j.position ?? ""), h("td", j.priority),
          h("td", fmtTime(j.estimated_start)))))) : h("p.muted", "Nothing of yours is queued or running."));
    } catch (error) {
      body.replaceChildren(errorBox(error));
    }
    timer = setTimeout(load, 3000);
  }
  load();
  return () => clearTimeout(timer);
}
