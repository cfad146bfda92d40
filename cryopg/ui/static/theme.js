// The colour theme, applied before the page paints (a classic script in <head>): the
// system's (prefers-color-scheme) unless the header's switch chose light or dark, kept in
// localStorage. The switch cycles auto, light, dark.
(() => {
  const KEY = "cryo.theme";
  const root = document.documentElement;
  const apply = (t) => { if (t === "light" || t === "dark") root.dataset.theme = t; else delete root.dataset.theme; };
  let theme = localStorage.getItem(KEY) || "auto";
  apply(theme);
  const label = () => `theme: ${theme}`;
  document.addEventListener("DOMContentLoaded", () => {
    const b = document.getElementById("theme-switch");
    if (!b) return;
    b.textContent = label();
    b.addEventListener("click", () => {
      theme = { auto: "light", light: "dark", dark: "auto" }[theme] || "auto";
      if (theme === "auto") localStorage.removeItem(KEY); else localStorage.setItem(KEY, theme);
      apply(theme);
      b.textContent = label();
    });
  });
})();
