// The workbook site's script (scripts/site.py copies it into the site; mkdocs.yml's
// extra_javascript). A click on an image of a page shows it at its natural size over the page
// (a forest plot's labels are then at their full size); a click anywhere or Esc closes it.
// Images inside a link keep their link.
document.addEventListener("click", (event) => {
  const img = event.target.closest && event.target.closest("article img");
  if (!img || img.closest("a") || img.closest(".wb-lightbox")) return;
  const box = document.createElement("div");
  box.className = "wb-lightbox";
  box.setAttribute("role", "dialog");
  box.setAttribute("aria-label", "enlarged image (click or Esc closes)");
  const big = new Image();
  big.src = img.currentSrc || img.src;
  big.alt = img.alt;
  box.appendChild(big);
  box.addEventListener("click", () => box.remove());
  document.body.appendChild(box);
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape") document.querySelectorAll(".wb-lightbox").forEach((b) => b.remove());
});
