// Presets: one card per seed figure with its description, cost estimate and a "run quick" button;
// once run, its latest study's figure and verdicts.

import { api, imageUrl } from "./api.js";
import { checksTable } from "./studies.js";
import {
  errorBox, fmtDuration, fmtNumber, h, keyedChildren, progressBar, routeQuery, setProgress, statusBadge,
} from "./util.js";

const DONE = new Set(["succeeded", "failed", "cancelled", "partial"]);

export function render(main) {
  const message = h("div");
  const grid = h("div.cards#presets");
  main.append(h("h1", "Presets"), h("p.muted", "The seed papers' figures as studies: run one at its quick (CPU) size; "
    + "its checks compare what was measured with what the theory predicts."), message, grid);
  let timer;
  let shown = false;
  const wanted = routeQuery().preset;

  async function load() {
    let presets, studies;
    try {
      [presets, studies] = await Promise.all([api("/v1/presets"), api("/v1/studies?limit=500")]);
    } catch (error) {
      message.replaceChildren(errorBox(error));
      return;
    }
    const latest = new Map(); // newest study of each preset (the list is newest first)
    for (const s of studies.items) if (s.preset && !latest.has(s.preset)) latest.set(s.preset, s);
    // a card is rebuilt only when its preset or its latest study's status changes; its cost estimate (runs that
    // end move it) and progress are updated in place: rebuilt every 3 s while a study ran, each card fetched its
    // figure and checks again, and lost a click on its button, an open list of checks, the figure's link
    keyedChildren(grid, presets, (p) => p.id, (p) => [{ ...p, sizes: null }, latest.get(p.id)?.id, latest.get(p.id)?.status],
      (p) => card(p, latest.get(p.id)),
      (node, p) => {
        node.querySelector(".estimate").textContent = estimate(p);
        const bar = node.querySelector(".progress");
        if (bar) setProgress(bar, latest.get(p.id)?.progress);
      });
    // a link to one preset (#/presets?preset=ID, from a study): its card marked at every refresh, scrolled to once
    const target = wanted && grid.querySelector(`article.preset[data-preset="${CSS.escape(wanted)}"]`);
    target?.classList.add("target");
    if (!shown) target?.scrollIntoView({ block: "start" });
    shown = true;
    if ([...latest.values()].some((s) => !DONE.has(s.status))) timer = setTimeout(load, 3000);
  }

  function card(p, study) {
    const quick = p.sizes.quick;
    const said = h("div");
    const run = h("button.primary", { type: "button", onclick: async () => {
      run.disabled = true;
      try {
        const created = await api(`/v1/presets/${p.id}/run`, { method: "POST", body: { size: "quick" } });
        location.hash = `#/studies/${created.id}`;
      } catch (error) {
        run.disabled = false;
        said.replaceChildren(errorBox(error));   // the last refusal only
      }
    } }, "Run quick");
    const result = study ? h("div",
      h("div", h("a", { href: `#/studies/${study.id}` }, "latest run"), " ", statusBadge(study.status)),
      DONE.has(study.status) ? h("div.preset-result", figure(study), verdicts(study)) : progressBar(study.progress))
      : "";
    return h(study ? "article.card.preset.has-result" : "article.card.preset", { dataset: { preset: p.id } },
      h("h3", p.title),
      h("div.muted", `seed ${p.seed} · ${p.figure} · tier ${p.tier}${p.exploratory ? " · exploratory" : ""} · ${p.kinds.join(", ")}`),
      h("p", p.description),
      h("div.estimate", estimate(p)),
      h("details", h("summary", `${p.checks.length} checks`), h("ul", p.checks.map((c) => h("li", c.claim)))),
      h("div.toolbar", quick ? run : ""), said, result);
  }

  function verdicts(study) {  // the list leaves checks out: the study itself has them
    const box = h("div.verdicts");
    api(`/v1/studies/${study.id}`).then((full) => box.replaceChildren(checksTable(full.checks)))
      .catch((error) => box.replaceChildren(errorBox(error)));
    return box;
  }

  // The figure large, its checks in the table beside it (not printed again in the image); a click
  // opens it at full size.
  function figure(study) {
    const img = h("img.figure", { alt: `figure of ${study.preset}` });
    const link = h("a.figure-link", { href: "#", title: "open the figure at full size" }, img);
    imageUrl(`/v1/studies/${study.id}/plots/figure.png?checks=false`).then((url) => {
      img.src = url;
      link.href = url;
      link.target = "_blank";
    }).catch((error) => img.replaceWith(errorBox(error)));
    return link;
  }

  load();
  return () => clearTimeout(timer);
}

function estimate(p) {
  return [p.sizes.quick && `quick: ${cost(p.sizes.quick)}`, p.sizes.paper && `paper: ${cost(p.sizes.paper)}`]
    .filter(Boolean).join(" · ");
}

// A size's cost: runs and estimated time on this service's workers of its kind (work when none of its kind and
// of a comparable size, at least a tenth of its runs' work and a second long, has finished there to time it),
// with the runs that timed it (estimated_from): single runs time a fused sweep high.
const TIMED_FROM = {
  preset: "from this preset's earlier runs",
  studies: "from earlier studies of its kind",
  runs: "from single runs of its kind: a study fuses its runs, so likely less",
};

function cost(size) {
  const where = size.gpu ? "GPU" : "CPU";
  const time = size.estimated_seconds === null || size.estimated_seconds === undefined
    ? `work ${fmtNumber(size.work)} (no ${where} run of its kind and size finished yet to time it)`
    : `~${fmtDuration(size.estimated_seconds)} on one ${where} worker (${TIMED_FROM[size.estimated_from]
      || "from earlier runs"})`;
  return `${size.runs} runs, ${time}`;
}
