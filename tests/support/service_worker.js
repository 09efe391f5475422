// Runs the relay's service worker (oar/web/static/service-worker.js) in Node as a browser runs
// it: its "push" event with the payload the push service delivered (decrypted), then a click on
// one of the notification's actions (or its body). The worker's own fetch (Node's) reaches the
// relay; what it showed and opened is printed as JSON.
//   node service_worker.js <service-worker.js> <scope> <payload JSON> <action> <maxActions>
"use strict";
const fs = require("fs");
const vm = require("vm");

const [workerFile, scope, payloadText, action, maxActions] = process.argv.slice(2);
const listeners = {};
const shown = [];
const opened = [];
const posted = [];

const realFetch = globalThis.fetch;
const self = {
  addEventListener: (name, listener) => { listeners[name] = listener; },
  registration: { scope, showNotification: async (title, options) => { shown.push({ title, options }); } },
  clients: { openWindow: async (url) => { opened.push(url); } },
  Notification: { maxActions: Number(maxActions) },
};
const context = vm.createContext({
  self, Notification: self.Notification, URL, JSON, Object, Array, Number, Boolean, Promise, console,
  fetch: async (url, options) => {
    const response = await realFetch(url, options);
    posted.push({ url, method: options.method, headers: options.headers, body: options.body, status: response.status });
    return response;
  },
});
vm.runInContext(fs.readFileSync(workerFile, "utf8"), context, { filename: workerFile });

async function dispatch(name, event) {
  const pending = [];
  listeners[name](Object.assign({ waitUntil: (promise) => pending.push(promise) }, event));
  await Promise.all(pending);
}

(async () => {
  const payload = JSON.parse(payloadText);
  await dispatch("push", { data: { json: () => payload, text: () => payloadText } });
  const notification = shown[0];
  await dispatch("notificationclick", {
    action, notification: { close: () => {}, data: notification.options.data },
  });
  process.stdout.write(JSON.stringify({ shown, opened, posted }));
})().catch((error) => { console.error(error); process.exit(1); });
