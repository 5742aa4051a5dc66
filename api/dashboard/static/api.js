// The dashboard's only way to the service: the public /v1 API, with the key (when auth is on) kept in
// sessionStorage and sent as a Bearer header, never in a URL. A 401 brings the key prompt back.

const KEY = "smd-key";

export class ApiError extends Error {
  constructor(status, detail) {
    super(typeof detail === "string" ? detail : JSON.stringify(detail));
    this.status = status;
    this.detail = detail;
  }
}

let asking = null; // one prompt for every request that got a 401 meanwhile

function askKey(reason) {
  if (asking) return asking;
  const dialog = document.getElementById("key-dialog");
  const input = document.getElementById("key-input");
  document.getElementById("key-reason").textContent = reason || "";
  input.value = "";
  asking = new Promise((resolve) => {
    const form = dialog.querySelector("form");
    form.onsubmit = (event) => {
      event.preventDefault();
      const key = input.value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY, key);
      dialog.close();
      asking = null;
      resolve();
    };
  });
  if (!dialog.open) dialog.showModal();
  input.focus();
  return asking;
}

export function authHeaders(extra = {}) {
  const key = sessionStorage.getItem(KEY);
  return key ? { ...extra, Authorization: `Bearer ${key}` } : { ...extra };
}

async function detailOf(response) {
  try {
    const body = await response.json();
    return body.detail ?? body;
  } catch {
    return response.statusText;
  }
}

// fetch with the key; a 401 asks for a key and tries again with it.
export async function authorizedFetch(path, init = {}) {
  for (;;) {
    const response = await fetch(path, { cache: "no-store", ...init, headers: authHeaders(init.headers) });
    if (response.status !== 401) return response;
    const detail = await detailOf(response);
    await askKey(typeof detail === "string" ? detail : "This service needs an API key.");
  }
}

// JSON from the API. With `etag`, a 304 answers {notModified: true}; every answer carries its etag.
export async function api(path, { method = "GET", body, etag } = {}) {
  const headers = {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (etag) headers["If-None-Match"] = etag;
  const response = await authorizedFetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 304) return { notModified: true, etag };
  if (!response.ok) throw new ApiError(response.status, await detailOf(response));
  if (response.status === 204) return null;
  const data = await response.json();
  const tag = response.headers.get("ETag");
  if (tag && data && typeof data === "object" && !Array.isArray(data)) {
    Object.defineProperty(data, "etag", { value: tag, enumerable: false });
  }
  return data;
}

// A file of the API saved under `filename` (through fetch, so that the key goes in a header).
export async function download(path, filename) {
  const response = await authorizedFetch(path);
  if (!response.ok) throw new ApiError(response.status, await detailOf(response));
  const url = URL.createObjectURL(await response.blob());
  const link = Object.assign(document.createElement("a"), { href: url, download: filename });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

// An image of the API as an object URL for an <img> (fetched with the key).
export async function imageUrl(path) {
  const response = await authorizedFetch(path);
  if (!response.ok) throw new ApiError(response.status, await detailOf(response));
  return URL.createObjectURL(await response.blob());
}

// Server-Sent Events read through fetch (EventSource cannot send an Authorization header).
// Calls onEvent(type, data) per event; resolves when the server ends the stream; rejects on a
// network error or when `signal` aborts. `lastEventId` resumes a stream.
export async function readEvents(path, onEvent, { signal, lastEventId } = {}) {
  const headers = { Accept: "text/event-stream" };
  if (lastEventId) headers["Last-Event-ID"] = lastEventId;
  const response = await authorizedFetch(path, { headers, signal });
  if (!response.ok) throw new ApiError(response.status, await detailOf(response));
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let id = lastEventId;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return id;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let type = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) type = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
        else if (line.startsWith("id:")) id = line.slice(3).trim();
      }
      if (data.length) onEvent(type, JSON.parse(data.join("\n")));
    }
  }
}

// Follow a resource's event stream until `isDone(data)`; when the stream cannot be read, poll
// `pollPath` every `everyMs` with If-None-Match instead. `onState(state, streamed)` gets each state
// (streamed: from the stream, not a poll); `onEvent("points", data)` the points events.
// `eventsPath` may be a function, asked again at each reconnection. Returns a function that stops following.
export function follow(eventsPath, pollPath, onState, isDone, { everyMs = 2000, onEvent = () => {} } = {}) {
  const controller = new AbortController();
  let stopped = false;
  (async () => {
    let lastId;
    let done = false;
    try {
      while (!stopped && !done) {
        const path = typeof eventsPath === "function" ? eventsPath() : eventsPath;
        lastId = await readEvents(path, (type, data) => {
          if (type === "deleted") done = true;
          else if (type === "points") onEvent(type, data);
          else { onState(data, true); if (isDone(data)) done = true; }
        }, { signal: controller.signal, lastEventId: lastId });
      }
      return;
    } catch (error) {
      if (stopped) return;
      console.warn("event stream unavailable, polling instead:", error.message);
    }
    let etag;
    while (!stopped) {
      try {
        const state = await api(pollPath, { etag });
        if (!state.notModified) {
          etag = state.etag;
          onState(state, false);
          if (isDone(state)) return;
        }
      } catch (error) {
        console.warn("poll failed:", error.message);
      }
      await new Promise((resolve) => setTimeout(resolve, everyMs));
    }
  })();
  return () => { stopped = true; controller.abort(); };
}
