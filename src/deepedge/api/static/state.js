// What the views share: the selection (also in the URL), the scroll a deep link asked for,
// and the newest lists of the refresh round. Each view keeps everything else to itself.

export const state = {
  job: null,          // id of the job shown in detail
  deployment: null,   // name of the deployment shown in detail
  node: null,         // name of the node shown in detail
  scrollTo: null,     // the detail a deep link opened, scrolled to once it is drawn
  data: emptyData(),
};

function emptyData() {
  return { jobs: [], deployments: null, nodes: null, nodesCluster: null, nodesStale: false };
}

export function resetState() {
  Object.assign(state, { job: null, deployment: null, node: null, scrollTo: null, data: emptyData() });
}
