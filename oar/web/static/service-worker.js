// The relay's service worker (docs/notifications.md#web-push): shows a Web Push notification
// even when no page of the relay is open, and opens its link when it is clicked.
"use strict";

self.addEventListener("push", function (event) {
  let data = {};
  try {
    data = event.data ? event.data.json() : {};
  } catch (error) {
    data = { title: "OAR", body: event.data ? event.data.text() : "" };
  }
  event.waitUntil(self.registration.showNotification(data.title || "OAR", {
    body: data.body || "",
    data: { link: data.link || "/" },
    tag: data.link || undefined,
  }));
});

self.addEventListener("notificationclick", function (event) {
  event.notification.close();
  const link = (event.notification.data && event.notification.data.link) || "/";
  event.waitUntil(self.clients.openWindow(link));
});
