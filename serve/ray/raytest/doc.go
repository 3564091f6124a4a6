// Package raytest emulates one Ray cluster's Serve REST API, for tests of
// code that drives Ray Serve through its dashboard, such as package
// serve/ray's adapter, without a Ray cluster: serve/ray/raytest is to
// serve/ray what net/http/httptest is to net/http.
//
// A Server is an http.Handler; give it to httptest.NewServer and point the
// client at the server's URL. It answers PUT, GET and DELETE of
// /api/serve/applications/ as Ray's dashboard does: it validates a config
// as Ray does, derives every deployment's replica target as Ray's
// controller does (capacity-adjusted num_replicas, autoscaling bounds
// whose floor is initial_replicas while scaling up and min_replicas
// otherwise, Ray's decimal half-up rounding, computed apart from
// serve/ray's arithmetic so that the two cannot share a mistake), and
// moves replicas toward those targets one poll (GET) at a time, at the
// pace Options sets.
//
// Faults are methods of the Server: a deployment that fails
// (FailDeployment), replicas that die (KillReplicas) or keep dying
// (CrashLoop), requests answered with an error (FailRequests), left
// hanging (Hang) or answered with garbage (Garbage), token authentication
// (RequireToken), and another writer's PUT (PutByOther). With
// Options.GuardRedeploys, a PUT that changes the config of a cluster not at
// target_capacity 0, or serving traffic (ServingFunc), is refused and
// listed by Violations. Inspection (TargetCapacity, Deployment,
// DeployedConfig, History, Polls, Puts, ...) counts no poll.
//
// A Server is safe for concurrent use. It stamps its History with
// Options.Clock, a fake.Clock, and its records are fake.Call values, as
// package fake's adapters record theirs.
package raytest
