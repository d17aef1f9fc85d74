/* Keys as in Perfetto and chrome://tracing: W/S zoom in/out around the centre, A/D pan by a fifth of
   the view, F fits the selected event, ] and [ follow the selected event's flow out of it and into it,
   / focuses the search box. Not while typing in a field. Each key clicks a hidden button of the page
   (or relayouts its first timeline: on the two-run page both follow).
   Dash serves every .js file of this folder on its own, after its own scripts (the page's
   {%scripts%}); the viewport callback (VIEWPORT_JS in callbacks.py) installs ntKey as the keydown handler. */
const NT_BUTTONS = {'f': 'nt-fit', ']': 'nt-follow-next', '[': 'nt-follow-prev'};
function ntKey(e) {
  const t = e.target;
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.isContentEditable)) return;
  const key = e.key.toLowerCase();
  if (NT_BUTTONS[key]) { const b = document.getElementById(NT_BUTTONS[key]); if (b) b.click(); return; }
  if (key === '/') { const s = document.getElementById('nt-search'); if (s) { s.focus(); e.preventDefault(); } return; }
  if (!'wasd'.includes(key) || key.length !== 1) return;
  const gd = document.querySelector('#nt-timeline .js-plotly-plot, #nt-cmp-timeline-a .js-plotly-plot');
  if (!gd || !gd._fullLayout || !gd._fullLayout.xaxis) return;
  const [a, b] = gd._fullLayout.xaxis.range.map(Number);
  const w = b - a, c = (a + b) / 2;
  let lo = a, hi = b;
  if (key === 'w') { lo = c - w * 0.3; hi = c + w * 0.3; }
  if (key === 's') { lo = c - w; hi = c + w; }
  if (key === 'a') { lo = a - w * 0.2; hi = b - w * 0.2; }
  if (key === 'd') { lo = a + w * 0.2; hi = b + w * 0.2; }
  e.preventDefault();
  Plotly.relayout(gd, {'xaxis.range[0]': lo, 'xaxis.range[1]': hi});
}
