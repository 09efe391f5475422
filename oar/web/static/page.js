// The owner's page: live updates by short polling, and two small form helpers.
//
// The page is rendered by the server. Its <main data-live="…"> names a JSON endpoint that
// answers the version of each region (data-region / data-version) and, on a session page,
// the reply being written. About once a second (a team run's view: more often, for its live
// Thoughts) the page asks; when a region's version
// changed, it fetches the page again and swaps just those regions (parsed by DOMParser, so
// the server's escaping stays intact); the reply being written is updated with textContent.
// Data never goes through innerHTML.
(function () {
  "use strict";

  const root = document.querySelector("main[data-live]");
  // A team run's view asks more often, so that a thought shows within a second.
  const POLL_MS = Number((root && root.dataset.pollMs) || 1000);

  function region(name, doc) {
    return (doc || document).querySelector('[data-region="' + name + '"]');
  }

  function nearBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 120;
  }

  function typingIn(element) {
    const active = document.activeElement;
    if (active && element.contains(active) && "value" in active && active.value !== "") return true;
    // A form changed and not saved yet (boxes ticked, a choice made): keep what the owner did.
    return element.querySelector("form[data-changed]") !== null;
  }

  // A region swapped for its new version keeps what the owner opened (the session's Settings).
  function keepOpen(current, next) {
    current.querySelectorAll("details[id]").forEach(function (details) {
      const fresh = next.querySelector("details#" + CSS.escape(details.id));
      if (fresh) fresh.open = details.open;
    });
  }

  function showInFlight(flight) {
    if (!flight) return;
    const box = document.querySelector('[data-message="' + flight.messageId + '"]');
    if (!box) return;
    const text = box.querySelector("[data-inflight-text]");
    if (text && text.textContent !== flight.text) text.textContent = flight.text;
    const status = box.querySelector("[data-inflight-status]");
    if (status) status.textContent = flight.status === "waiting_for_answer" ? "waiting for an answer" : "writing…";
    const tools = box.querySelector("[data-inflight-tools]");
    if (tools && tools.children.length !== flight.tools.length) {
      tools.replaceChildren(...flight.tools.map(function (line) {
        const item = document.createElement("li");
        item.textContent = line;
        return item;
      }));
    }
  }

  async function refresh(names) {
    const response = await fetch(window.location.href, { credentials: "same-origin", cache: "no-store" });
    if (!response.ok || response.redirected) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    for (const name of names) {
      const next = region(name, fresh);
      const current = region(name);
      if (!next || !current || typingIn(current)) continue;
      const imported = document.importNode(next, true);
      keepOpen(current, imported);
      current.replaceWith(imported);
    }
  }

  // A team run's Thoughts panel: entries the live answer brought, appended as text.
  function showThoughts(thoughts) {
    const list = document.querySelector("[data-thoughts]");
    if (!list || !thoughts) return;
    for (const thought of thoughts) {
      if (thought.id <= Number(list.dataset.after || 0)) continue;
      const item = document.createElement("li");
      item.className = "thought";
      item.dataset.thought = String(thought.id);
      const agent = document.createElement("span");
      agent.className = "agent";
      agent.textContent = thought.agent_id;
      const text = document.createElement("span");
      text.className = "text";
      text.textContent = thought.content;
      item.append(agent, " ", text);
      list.append(item);
      list.dataset.after = String(thought.id);
      list.scrollTop = list.scrollHeight;
    }
  }

  function liveUrl() {
    const list = document.querySelector("[data-thoughts]");
    if (!list) return root.dataset.live;
    const url = new URL(root.dataset.live, window.location.href);
    url.searchParams.set("after", list.dataset.after || "0");
    return url.toString();
  }

  let polling = false;
  async function poll() {
    if (polling || document.hidden) return;
    polling = true;
    try {
      const response = await fetch(liveUrl(), {
        credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" },
      });
      if (response.status === 401) {
        window.location.assign("/");
        return;
      }
      if (!response.ok) return;
      const data = await response.json();
      const follow = nearBottom();
      if ("inFlight" in data) showInFlight(data.inFlight);
      if ("thoughts" in data) showThoughts(data.thoughts);
      const stale = Object.keys(data.regions || {}).filter(function (name) {
        const current = region(name);
        return current && current.dataset.version !== data.regions[name];
      });
      if (stale.length) await refresh(stale);
      if (follow && root.querySelector(".messages")) window.scrollTo(0, document.body.scrollHeight);
    } catch (error) {
      // The relay restarting or the network dropping: the next poll tries again.
    } finally {
      polling = false;
    }
  }

  // <form data-autosubmit>: a switch that saves when flipped (its Save button stays for no-JS).
  document.addEventListener("change", function (event) {
    const form = event.target.closest && event.target.closest("form[data-autosubmit]");
    if (form) form.requestSubmit();
  });

  // A form the owner changed and has not sent (autosubmit forms send at once).
  document.addEventListener("change", function (event) {
    const form = event.target.form;
    if (form && !form.hasAttribute("data-autosubmit")) form.dataset.changed = "";
  });

  // <button data-copy="selector">: copy that element's text (a token, a client's lines). The
  // Clipboard API needs a secure context (https, or this machine); elsewhere the text is
  // selected and copied the old way.
  document.addEventListener("click", async function (event) {
    const button = event.target.closest && event.target.closest("button[data-copy]");
    if (!button) return;
    const source = document.querySelector(button.dataset.copy);
    if (!source) return;
    const text = source.textContent;
    let copied = false;
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(text);
        copied = true;
      }
    } catch (error) {
      copied = false;
    }
    if (!copied) {
      const range = document.createRange();
      range.selectNodeContents(source);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      copied = document.execCommand("copy");
    }
    button.textContent = copied ? "Copied" : "Selected: copy it now";
    button.classList.toggle("copied", copied);
  });

  // <form data-confirm="…">: ask before something that cannot be undone.
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) event.preventDefault();
  });

  // The Inbox count (nav badge and title) and browser notifications of page channels
  // (docs/notifications.md#the-open-page): the relay's notification feed, polled once a second
  // on every signed-in page, hidden or not. Its text goes in via textContent and the
  // Notifications API only.
  const feed = document.body.dataset.notify;
  const baseTitle = document.title;
  const LAST_KEY = "oar-notify-last";

  function showCount(count) {
    document.title = count ? "(" + count + ") " + baseTitle : baseTitle;
    const inbox = document.querySelector('nav a[href$="/inbox"]');
    if (!inbox) return;
    let badge = inbox.querySelector(".count");
    if (!count) {
      if (badge) badge.remove();
      return;
    }
    if (!badge) {
      badge = document.createElement("span");
      badge.className = "count";
      badge.title = "pending cards and questions";
      inbox.append(" ", badge);
    }
    if (badge.textContent !== String(count)) badge.textContent = String(count);
  }

  function notify(item) {
    if (!("Notification" in window) || Notification.permission !== "granted") return;
    const shown = new Notification(item.title, { body: item.body, tag: "oar-" + item.id });
    shown.onclick = function () {
      window.focus();
      if (item.link) window.location.assign(item.link);
    };
  }

  let feeding = false;
  async function pollFeed() {
    if (feeding) return;
    feeding = true;
    try {
      const after = window.sessionStorage.getItem(LAST_KEY);
      const url = feed + (after ? "?after=" + encodeURIComponent(after) : "");
      const response = await fetch(url, { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } });
      if (!response.ok) return;
      const data = await response.json();
      showCount(data.inboxCount);
      (data.notifications || []).forEach(notify);
      window.sessionStorage.setItem(LAST_KEY, String(data.last));
    } catch (error) {
      // The relay restarting or the network dropping: the next poll tries again.
    } finally {
      feeding = false;
    }
  }

  // Settings: ask this browser for permission to show notifications.
  const askButton = document.querySelector("[data-notify-permission]");
  const askState = document.querySelector("[data-notify-permission-state]");
  function showPermission() {
    if (!askButton) return;
    const supported = "Notification" in window;
    askButton.hidden = !supported || Notification.permission !== "default";
    if (askState) {
      askState.textContent = !supported ? "This browser cannot show notifications."
        : Notification.permission === "granted" ? "This browser shows notifications."
        : Notification.permission === "denied" ? "This browser blocks notifications from this page (its site settings can allow them)."
        : "";
    }
  }
  if (askButton) {
    askButton.addEventListener("click", function () {
      Notification.requestPermission().then(showPermission);
    });
    showPermission();
  }

  // Settings: subscribe this browser to Web Push (its service worker shows what is pushed).
  const pushForm = document.querySelector("form[data-push-form]");
  function keyBytes(text) {
    const padded = (text + "===".slice((text.length + 3) % 4)).replace(/-/g, "+").replace(/_/g, "/");
    return Uint8Array.from(window.atob(padded), function (c) { return c.charCodeAt(0); });
  }
  if (pushForm && "serviceWorker" in navigator && "PushManager" in window) {
    pushForm.hidden = false;
    pushForm.addEventListener("submit", async function (event) {
      if (pushForm.elements.endpoint.value) return; // filled: the form goes to the relay
      event.preventDefault();
      const state = pushForm.querySelector("[data-push-state]");
      try {
        const registration = await navigator.serviceWorker.register("/service-worker.js", { scope: "/" });
        await navigator.serviceWorker.ready;
        const subscription = await registration.pushManager.subscribe({
          userVisibleOnly: true, applicationServerKey: keyBytes(pushForm.dataset.pushKey),
        });
        const json = subscription.toJSON();
        pushForm.elements.endpoint.value = json.endpoint;
        pushForm.elements.p256dh.value = json.keys.p256dh;
        pushForm.elements.auth.value = json.keys.auth;
        pushForm.elements.label.value = navigator.userAgent.slice(0, 100);
        pushForm.requestSubmit();
      } catch (error) {
        if (state) state.textContent = "This browser could not subscribe (" + error.name + ").";
      }
    });
  }

  if (feed) {
    pollFeed();
    window.setInterval(pollFeed, POLL_MS);
  }
  if (root) {
    window.setInterval(poll, POLL_MS);
    document.addEventListener("visibilitychange", poll);
  }
  if (window.location.hash === "#end") window.scrollTo(0, document.body.scrollHeight);
})();
