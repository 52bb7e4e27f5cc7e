// make site: a click on a figure shows it at its full resolution (scroll to see all of it); a click or Escape
// closes it. Plain DOM, nothing fetched.
document.addEventListener("click", function (ev) {
  const open = document.querySelector(".site-zoom");
  if (open) { open.remove(); return; }
  const img = ev.target.closest && ev.target.closest("article img");
  if (!img) return;
  ev.preventDefault();
  const box = document.createElement("div");
  box.className = "site-zoom";
  const big = document.createElement("img");
  big.src = img.currentSrc || img.src;
  big.alt = img.alt;
  box.appendChild(big);
  document.body.appendChild(box);
});
document.addEventListener("keydown", function (ev) {
  const open = document.querySelector(".site-zoom");
  if (open && ev.key === "Escape") open.remove();
});
