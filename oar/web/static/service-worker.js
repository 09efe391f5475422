// The relay's service worker (docs/notifications.md#web-push): shows a Web Push notification
// even when no page of the relay is open, and opens its link when it is clicked. A notification
// that offers a decision (docs/notifications.md#deciding-from-a-notification) carries a
// single-use token and actions: choosing one posts the decision to the relay without opening
// a page; the body opens the decision page.
"use strict";

const DECIDE_PATH = "/api/v1/decide";
const MORE = { action: "more", title: "More…" };

// The actions the platform can show: all when they fit, else the first ones and "More…".
function shownActions(data) {
  const actions = Array.isArray(data.actions) ? data.actions : [];
  const limit = self.Notification && Notification.maxActions ? Notification.maxActions : 2;
  const more = Boolean(data.more);
  if (actions.length + (more ? 1 : 0) <= limit) return more ? actions.concat([MORE]) : actions;
  return limit > 1 ? actions.slice(0, limit - 1).concat([MORE]) : [];
}

self.addEventListener("push", function (event) {
  let data = {};
  try {
    data = event.data ? event.data.json() : {};
  } catch (error) {
    data = { title: "OAR", body: event.data ? event.data.text() : "" };
  }
  const options = {
    body: data.body || "",
    data: { link: data.link || "/", token: data.token || null, title: data.title || "OAR" },
    tag: data.link || undefined,
  };
  if (data.token) options.actions = shownActions(data);
  event.waitUntil(self.registration.showNotification(data.title || "OAR", options));
});

// What an action posts with the token: a card's decision, or a question's option by its index.
function decisionOf(action) {
  if (action.startsWith("option:")) return { option: Number(action.slice("option:".length)) };
  return { decision: action };
}

async function decide(data, action) {
  const url = new URL(DECIDE_PATH, self.registration.scope);
  const response = await fetch(url.href, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(Object.assign({ token: data.token }, decisionOf(action))),
    credentials: "omit",
  });
  if (!response.ok) {
    // Used, expired or decided meanwhile: the decision page says which, and by whom.
    await self.clients.openWindow(data.link);
    return;
  }
  const answer = await response.json();
  const status = answer.outcome && answer.outcome.status;
  const said = status === "denied" ? "Denied." : status === "allowed" ? "Allowed." : "Answered.";
  await self.registration.showNotification(data.title, { body: said, tag: data.link, data: { link: data.link } });
}

self.addEventListener("notificationclick", function (event) {
  event.notification.close();
  const data = event.notification.data || {};
  const link = data.link || "/";
  if (event.action && event.action !== MORE.action && data.token) {
    event.waitUntil(decide(data, event.action));
    return;
  }
  event.waitUntil(self.clients.openWindow(link));
});
