/* Navigation's clientside callbacks (dashboard/router.py). */
window.dash_clientside = Object.assign({}, window.dash_clientside, {
  fleetguard: Object.assign({}, (window.dash_clientside || {}).fleetguard, {
    // The path to draw, or nothing on the first call when the layout already holds this path's page.
    fgRoute: function (pathname, search, served) {
      var here = (pathname || '/') + (search || '');
      if (served !== null && served !== undefined && served === here) {
        return [window.dash_clientside.no_update, null];
      }
      return [here, null];
    },
    fgTitle: function (title) {
      if (title) document.title = title;
      return window.dash_clientside.no_update;
    },
  }),
});
