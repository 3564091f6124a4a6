package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/strategy"
)

// Metrics are the operator's Prometheus metrics, served by
// controller-runtime's metrics endpoint next to its own, their names
// prefixed with MetricsPrefix.
type Metrics struct {
	phase     *prometheus.GaugeVec
	weight    *prometheus.GaugeVec
	capacity  *prometheus.GaugeVec
	ready     *prometheus.GaugeVec
	hops      *prometheus.CounterVec
	aborts    *prometheus.CounterVec
	reconcile *prometheus.HistogramVec
}

var phases = []strategy.Phase{strategy.PhaseProgressing, strategy.PhasePaused, strategy.PhaseAborting,
	strategy.PhaseAborted, strategy.PhaseRolledBack, strategy.PhaseCompleting, strategy.PhaseSucceeded, strategy.PhaseSuspended}

// NewMetrics creates the metrics and registers them with registry
// (controller-runtime's metrics.Registry when nil).
func NewMetrics(registry prometheus.Registerer) *Metrics {
	if registry == nil {
		registry = crmetrics.Registry
	}
	rel := []string{"namespace", "release"}
	m := &Metrics{
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricsPrefix + "_phase",
			Help: "1 for the phase the Release's rollout is in, 0 for the others."}, append(rel, "phase")),
		weight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricsPrefix + "_weight_percent",
			Help: "Canary weight observed on the route, in percent."}, rel),
		capacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricsPrefix + "_capacity_percent",
			Help: "Capacity each role's side is set to, in percent of the full replica count."}, append(rel, "role")),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricsPrefix + "_ready_capacity_percent",
			Help: "Ready capacity of each role's side, in percent of the full replica count."}, append(rel, "role")),
		hops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricsPrefix + "_hops_total",
			Help: "Hops applied (weight, capacity, deploy)."}, append(rel, "kind")),
		aborts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricsPrefix + "_aborts_total",
			Help: "Rollouts aborted."}, rel),
		reconcile: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricsPrefix + "_reconcile_seconds",
			Help: "Time of a Release reconcile.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, rel),
	}
	registry.MustRegister(m.phase, m.weight, m.capacity, m.ready, m.hops, m.aborts, m.reconcile)
	return m
}

// reconciled records one reconcile of the Runner.
func (m *Metrics) reconciled(namespace, name string, e rollout.Event) {
	for _, h := range e.Applied {
		m.hops.WithLabelValues(namespace, name, string(h.Kind)).Inc()
	}
	if e.After.Aborted != nil && e.Before.Aborted == nil {
		m.aborts.WithLabelValues(namespace, name).Inc()
	}
	s := &e.After
	for _, p := range phases {
		v := 0.0
		if s.Phase == p {
			v = 1
		}
		m.phase.WithLabelValues(namespace, name, string(p)).Set(v)
	}
	m.weight.WithLabelValues(namespace, name).Set(float64(s.Observed.Weight))
	m.capacity.WithLabelValues(namespace, name, "stable").Set(float64(s.Observed.Stable.Capacity))
	m.capacity.WithLabelValues(namespace, name, "canary").Set(float64(s.Observed.Canary.Capacity))
	m.ready.WithLabelValues(namespace, name, "stable").Set(float64(s.Observed.Stable.Ready))
	m.ready.WithLabelValues(namespace, name, "canary").Set(float64(s.Observed.Canary.Ready))
}

// took records the duration of a reconcile.
func (m *Metrics) took(namespace, name string, d time.Duration) {
	m.reconcile.WithLabelValues(namespace, name).Observe(d.Seconds())
}

// forget drops the series of a deleted Release.
func (m *Metrics) forget(namespace, name string) {
	l := prometheus.Labels{"namespace": namespace, "release": name}
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{m.phase, m.weight, m.capacity, m.ready, m.hops, m.aborts, m.reconcile} {
		v.DeletePartialMatch(l)
	}
}
