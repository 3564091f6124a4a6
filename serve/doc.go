// Package serve is the serving side of an upgrade: what provisions the
// capacity each side of a rollout serves with, and what keeps requests
// whole while a server is replaced. It holds no code of its own; each
// sub-package stands alone and imports none of the others.
//
// Capacity, as a rollout.CapacitySetter for each side:
//
//   - serve/ray sets a Ray cluster's Serve target_capacity through the Ray
//     dashboard's REST API and reports ready capacity from replica counts,
//     for an upgrade between two Ray clusters; serve/ray/raytest emulates
//     a Ray cluster's dashboard for its tests.
//   - serve/replicas scales a Kubernetes workload (a Deployment, a
//     StatefulSet, or any kind with a scale subresource) and reports the
//     share of its full replica count that is available.
//
// Requests, while a server process is replaced:
//
//   - serve/drain takes an HTTP server out of service without failing a
//     request: it finishes what it accepted and refuses new work in a way
//     clients recognise.
//   - serve/retry is the client transport that retries those refusals, and
//     only what is safe to retry.
//
// The traffic split between the two sides is not here: see package gateway
// for Gateway API routes.
package serve
