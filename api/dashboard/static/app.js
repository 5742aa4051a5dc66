// The dashboard's router: URL fragments to pages; each page renders into <main> and returns a
// function that stops its timers and streams when the page is left.

import * as experiment from "./experiment.js";
import * as experiments from "./experiments.js";
import * as form from "./form.js";
import * as presets from "./presets.js";
import * as queue from "./queue.js";
import * as studies from "./studies.js";
import * as studyform from "./studyform.js";

const ROUTES = [
  [/^#\/experiments\/([0-9a-f]+)$/, experiment.render, "experiments"],
  [/^#\/(?:experiments)?$/, experiments.render, "experiments"],
  [/^#\/new$/, form.render, "new"],
  [/^#\/studies\/new$/, studyform.render, "studies"],
  [/^#\/studies\/([0-9a-f]+)$/, studies.renderStudy, "studies"],
  [/^#\/studies$/, studies.renderList, "studies"],
  [/^#\/presets$/, presets.render, "presets"],
  [/^#\/queue$/, queue.render, "queue"],
];

let leave = () => {};

function route() {
  const hash = (location.hash || "#/").split("?")[0];
  leave();
  const main = document.getElementById("main");
  main.replaceChildren();
  for (const [pattern, render, tab] of ROUTES) {
    const match = hash.match(pattern);
    if (!match) continue;
    for (const link of document.querySelectorAll("nav a")) link.classList.toggle("active", link.dataset.tab === tab);
    leave = render(main, match.slice(1)) || (() => {});
    return;
  }
  main.append(Object.assign(document.createElement("p"), { textContent: `No page ${hash}.` }));
  leave = () => {};
}

window.addEventListener("hashchange", route);
route();
