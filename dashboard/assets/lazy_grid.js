/* AG Grid's bundle on first use (dashboard/grid_bundle.py): until a grid is drawn, window.dash_ag_grid is a
   stand-in whose AgGrid loads the bundle (which replaces window.dash_ag_grid) and then draws the real grid. */
(function () {
  var named = document.getElementById('fg-grid-bundle');
  if (!named || window.dash_ag_grid || !window.React) return;
  var React = window.React;
  var loading = null;
  function load() {
    if (!loading) {
      loading = new Promise(function (resolve, reject) {
        var script = document.createElement('script');
        script.src = named.getAttribute('data-src');
        script.onload = function () { resolve({ default: window.dash_ag_grid.AgGrid }); };
        script.onerror = reject;
        document.body.appendChild(script);
      });
    }
    return loading;
  }
  var Real = React.lazy(load);
  function AgGrid(props) {
    return React.createElement(React.Suspense, { fallback: null }, React.createElement(Real, props));
  }
  // What Dash reads off a component class before drawing it (persistence of the filter model).
  AgGrid.defaultProps = { persisted_props: ['filterModel'], persistence_type: 'local' };
  window.dash_ag_grid = { AgGrid: AgGrid };
})();
