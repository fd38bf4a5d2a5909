// meshfed fleet console: keep the page live without reloading it. Every
// few seconds the page's <main> is fetched again (the server renders it
// alone for the X-Meshfed-Fragment header) and swapped in when it changed.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var live = document.getElementById("live");
  var every = parseInt(document.body.dataset.refreshMs, 10) || 2000;
  var last = main.innerHTML;

  function say(text, state) {
    live.textContent = text;
    live.dataset.state = state;
  }

  function refresh() {
    if (document.hidden) {
      setTimeout(refresh, every);
      return;
    }
    fetch(location.href, { headers: { "X-Meshfed-Fragment": "main" }, cache: "no-store" })
      .then(function (resp) {
        if (!resp.ok) {
          throw new Error("HTTP " + resp.status);
        }
        return resp.text();
      })
      .then(function (html) {
        // Leave the content alone while the reader has focus inside it.
        var focused = main.contains(document.activeElement) && document.activeElement !== main;
        if (html !== last && !focused) {
          main.innerHTML = html;
          last = html;
        }
        say("live · updated " + new Date().toLocaleTimeString(), "live");
      })
      .catch(function (err) {
        say("cannot reach this replica (" + err.message + "): retrying", "down");
      })
      .finally(function () {
        setTimeout(refresh, every);
      });
  }
  setTimeout(refresh, every);
})();
