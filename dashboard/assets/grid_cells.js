/* AG Grid cell renderers of the dashboard (dashboard/components.py `Col.link_to`): a link column's rows carry
   the plain value (a GPU's UUID, a host's name) and the cell is drawn as a link to its page, instead of each
   row carrying a markdown link that repeats the value in its target: at 16,384 rows those links were 2.3 MB
   of the predictions page's 3.8 MB of JSON, and each cell was drawn through the markdown renderer. */
(function () {
  var funcs = (window.dashAgGridComponentFunctions = window.dashAgGridComponentFunctions || {});
  funcs.PathLink = function (props) {
    if (props.value === null || props.value === undefined || props.value === '') return '';
    var text = String(props.value);
    // As dashboard.components.href quotes a path segment: the name never leaves its segment.
    return window.React.createElement('a', { href: props.path + encodeURIComponent(text) }, text);
  };
})();
