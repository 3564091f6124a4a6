package ray

import (
	"fmt"
	"maps"
	"math"
	"math/big"
	"slices"
	"strings"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// CapacityAdjusted returns the replica count Ray Serve aims for when a
// deployment of n replicas (or an autoscaling bound of n) runs under
// targetCapacity: n itself for a nil (null) target capacity or 100; 0 for
// a target capacity of 0 or for n = 0; otherwise n * targetCapacity / 100
// rounded half up (2.5 becomes 3), and never below 1. A negative n counts
// as 0; a target capacity outside 0..100 is clamped into it.
func CapacityAdjusted(n int64, targetCapacity *float64) int64 {
	if n <= 0 {
		return 0
	}
	if targetCapacity == nil {
		return n
	}
	tc := *targetCapacity
	switch {
	case math.IsNaN(tc) || tc >= 100:
		return n
	case tc <= 0:
		return 0
	}
	var q int64
	if t := int64(tc); float64(t) == tc && n <= math.MaxInt64/100 {
		q = (n*t + 50) / 100 // whole percent: exact in integers
	} else {
		// Ray multiplies in floating point, then divides and rounds in
		// decimal; the product is a float64, so a rational is exact.
		r := new(big.Rat).SetFloat64(float64(n) * tc)
		if r == nil {
			return n
		}
		r.Quo(r, big.NewRat(100, 1))
		r.Add(r, big.NewRat(1, 2))
		q = new(big.Int).Quo(r.Num(), r.Denom()).Int64() // floor: both positive
	}
	return max(q, 1)
}

// ServeStatus is what one GET of a cluster's Serve applications says about
// the applications an adapter manages, with the readiness upshift derives
// from it. Embedded CapacityStatus is what Capacity returns.
type ServeStatus struct {
	rollout.CapacityStatus
	// TargetCapacity is the cluster's target_capacity (nil for null).
	TargetCapacity *float64
	// Applications are the managed applications, in the config's order.
	Applications []AppStatus
}

// AppStatus is one managed application.
type AppStatus struct {
	Name string
	// Found reports the application is live on the cluster.
	Found bool
	// Status and Message are Ray's, as reported: Status is one of
	// NOT_STARTED, DEPLOYING, DEPLOY_FAILED, RUNNING, UNHEALTHY and
	// DELETING.
	Status  string
	Message string
	// Ready is the least Ready of its deployments, in percent.
	Ready int32
	// Settled: the application is RUNNING and every deployment settled.
	Settled     bool
	Deployments []DeploymentStatus
}

// DeploymentStatus is one deployment of a managed application.
type DeploymentStatus struct {
	Name string
	// Status and Message are Ray's, as reported: Status is one of
	// UPDATING, HEALTHY, UNHEALTHY, DEPLOY_FAILED, UPSCALING and
	// DOWNSCALING.
	Status      string
	Message     string
	Autoscaling bool
	// Full is the replica count at full capacity: num_replicas, or for an
	// autoscaling deployment its min_replicas, the floor Ray scales by
	// target_capacity. (While the target capacity rises, Ray keeps an
	// autoscaling deployment that has initial_replicas at no less than
	// initial_replicas scaled, which is never fewer.)
	Full int64
	// Target is CapacityAdjusted(Full, target_capacity): what Ray aims for
	// at least (an autoscaling deployment may be asked for more, under
	// load or while the target capacity rises).
	Target int64
	// ReportedTarget is Ray's target_num_replicas.
	ReportedTarget int64
	// Running counts replicas in state RUNNING; NotRunning the others
	// (starting, updating, recovering, stopping...).
	Running, NotRunning int64
	// Ready is min(Running, Target) as a share of Full, in percent
	// rounded down: what the deployment can carry now, never more than
	// Ray's rounding grants at this target capacity.
	Ready int32
	// Settled: HEALTHY, no replica starting or stopping, Running equal to
	// ReportedTarget, and ReportedTarget consistent with Target.
	Settled bool
}

// evaluate derives the readiness of the named applications from a decoded
// GET answer. It is the pure half of Capacity:
//
//   - Capacity is target_capacity rounded down, 100 and Steady for null.
//   - A deployment's Ready is min(RUNNING replicas, Ray's capacity-adjusted
//     target) / full count; an application's Ready is the least of its
//     deployments'; the side's Ready the least of its applications'. A
//     deployment whose full count is 0 (scale to zero) does not constrain
//     its application; an application with no such constraint is as ready
//     as the capacity it is set to.
//   - Settled needs every application found, RUNNING, and every deployment
//     settled (see DeploymentStatus).
//   - When none of the applications is live, the side holds nothing:
//     Capacity 0, Ready 0, Settled.
//   - Health is Unhealthy when an application or deployment is
//     DEPLOY_FAILED or UNHEALTHY, with Ray's messages; Healthy otherwise.
func evaluate(d *instanceDetails, apps []string) ServeStatus {
	var o ServeStatus
	if d == nil {
		d = &instanceDetails{}
	}
	if tc := d.TargetCapacity; tc != nil {
		v := *tc // the answer may be shared by later reads: the caller gets its own
		o.TargetCapacity = &v
	}
	o.Capacity, o.Steady = 100, true
	if tc := d.TargetCapacity; tc != nil {
		o.Capacity, o.Steady = int32(math.Floor(min(max(*tc, 0), 100))), false
	}
	o.Ready, o.Settled, o.Health = 100, true, strategy.HealthHealthy
	var problems []string
	found := 0
	for _, name := range apps {
		a := AppStatus{Name: name}
		app, ok := d.Applications[name]
		if !ok {
			o.Ready, o.Settled = 0, false
			o.Applications = append(o.Applications, a)
			continue
		}
		found++
		a.Found, a.Status, a.Message = true, app.Status, app.Message
		if app.Status == appDeployFailed || app.Status == appUnhealthy {
			problems = append(problems, fmt.Sprintf("application %q is %s: %s", name, app.Status, app.Message))
		}
		a.Ready, a.Settled = o.Capacity, app.Status == appRunning
		if app.Status == appDeleting || len(app.Deployments) == 0 {
			a.Ready = 0
		}
		for _, dn := range slices.Sorted(maps.Keys(app.Deployments)) {
			dep := app.Deployments[dn]
			do := observeDeployment(dn, &dep, d.TargetCapacity)
			if dep.Status == deploymentDeployFailed || dep.Status == deploymentUnhealthy {
				problems = append(problems, fmt.Sprintf("application %q deployment %q is %s: %s", name, dn, dep.Status, dep.Message))
			}
			if do.Full > 0 {
				a.Ready = min(a.Ready, do.Ready)
			}
			a.Settled = a.Settled && do.Settled
			a.Deployments = append(a.Deployments, do)
		}
		o.Ready = min(o.Ready, a.Ready)
		o.Settled = o.Settled && a.Settled
		o.Applications = append(o.Applications, a)
	}
	if found == 0 {
		o.Capacity, o.Steady, o.Ready, o.Settled = 0, false, 0, true
	}
	if len(problems) > 0 {
		o.Health, o.HealthMessage = strategy.HealthUnhealthy, strings.Join(problems, "; ")
	}
	return o
}

func observeDeployment(name string, dep *deploymentDetails, tc *float64) DeploymentStatus {
	full, auto, err := dep.DeploymentConfig.full("")
	if err != nil {
		full = 0 // decodeInstanceDetails rejects this; evaluate stays total
	}
	do := DeploymentStatus{
		Name: name, Status: dep.Status, Message: dep.Message, Autoscaling: auto,
		Full: full, Target: CapacityAdjusted(full, tc), ReportedTarget: dep.TargetNumReplicas,
	}
	for _, r := range dep.Replicas {
		if r.State == replicaRunning {
			do.Running++
		} else {
			do.NotRunning++
		}
	}
	if do.Full > 0 {
		do.Ready = int32(min(do.Running, do.Target) * 100 / do.Full)
	} else {
		do.Ready = 100
	}
	targetOK := do.ReportedTarget == do.Target
	if auto {
		targetOK = do.ReportedTarget >= do.Target // the autoscaler may want more than the floor
	}
	do.Settled = dep.Status == deploymentHealthy && do.NotRunning == 0 && do.Running == do.ReportedTarget && targetOK
	return do
}
