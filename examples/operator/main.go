// Command operator is an example Kubernetes operator built on upshift and
// controller-runtime, meant to be copied as the start of your own. It
// reconciles Releases (api/v1alpha1): each names two Deployments (sides A
// and B) and the HTTPRoute in front of them, and a change of spec.revision
// rolls the new revision out on the idle side with the Release's strategy,
// moving the route's weights and the Deployments' replicas in safe hops.
// The rollout's state lives in the Release's status, so a restarted
// operator resumes where it stopped; several replicas run with leader
// election. A wiped or restored status is adopted from the route and the
// Deployments as they are. spec.analysis (rollout/analysis.Spec) judges
// the canary from the Prometheus it names.
//
// Each Release claims the route rule and the Deployments it moves: a
// second Release pointed at them is refused, reports Degraded with reason
// Claimed naming the first, and writes nothing. The finalizer
// operator.upshift.dev/claims keeps a deleted Release until its claims are
// released.
//
//	go run ./examples/operator -namespace shop -metrics-bind-address :8080
//
// -max-concurrent-reconciles (1 by default) reconciles that many Releases
// at once. Reads come from the manager's cache; writes are what the hops
// need (-hop-events adds an Event per hop). To shard, run several
// Deployments of the operator, each with -release-selector naming its
// share of the Releases by label, and give every Release exactly one
// shard's label. Install config/crd and bind config/rbac/role.yaml to the
// operator's ServiceAccount first; generate.sh regenerates both from the
// code. See docs/design/examples.md for adoption, claims, writes and shards.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/examples/operator/controller"
)

// Config holds the flags.
type Config struct {
	Namespace      string
	PeerNamespaces string
	MetricsAddr    string
	ProbeAddr      string
	LeaderElect    bool
	LeaseNamespace string
	LeaseDuration  time.Duration
	RenewDeadline  time.Duration
	RetryPeriod    time.Duration
	Workers        int
	Verbose        bool
	HopEvents      bool
	Selector       string
	LeaseID        string
}

func main() {
	var cfg Config
	flag.StringVar(&cfg.Namespace, "namespace", "", "the namespace whose Releases are managed (default: all namespaces)")
	flag.StringVar(&cfg.PeerNamespaces, "peer-namespaces", "", "comma-separated namespaces whose HTTPRoutes are read to place header-route and sticky rules among other teams' rules on the same listener (default: -namespace when set, else all namespaces)")
	flag.StringVar(&cfg.MetricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint (0: off)")
	flag.StringVar(&cfg.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (0: off)")
	flag.BoolVar(&cfg.LeaderElect, "leader-elect", true, "run with leader election, so that only one replica reconciles")
	flag.StringVar(&cfg.LeaseNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default: -namespace, or the Pod's)")
	flag.DurationVar(&cfg.LeaseDuration, "lease-duration", 15*time.Second, "how long a standby waits before taking over a Lease that is not renewed")
	flag.DurationVar(&cfg.RenewDeadline, "renew-deadline", 10*time.Second, "how long the leader tries to renew its Lease before it stops leading")
	flag.DurationVar(&cfg.RetryPeriod, "retry-period", 2*time.Second, "how often a replica tries to take or renew the Lease")
	flag.IntVar(&cfg.Workers, "max-concurrent-reconciles", 1, "how many Releases are reconciled at once (each Release is only ever reconciled by one at a time)")
	flag.BoolVar(&cfg.Verbose, "v", false, "log every applied hop")
	flag.BoolVar(&cfg.HopEvents, "hop-events", false, "record an Event for every hop, not only for phase changes, aborts, commands and errors (one more API write per hop)")
	flag.StringVar(&cfg.Selector, "release-selector", "", "label selector of the Releases this replica reconciles, to shard Releases across replicas (default: all)")
	flag.StringVar(&cfg.LeaseID, "leader-election-id", "", "name of the leader election Lease (default: "+controller.Name+", and one per -release-selector)")
	flag.Parse() // also -kubeconfig, registered by controller-runtime
	level := slog.LevelInfo
	if cfg.Verbose {
		level = slog.LevelDebug
	}
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	if err := run(ctrl.SetupSignalHandler(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, "operator:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg Config) error {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, gwv1.Install, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	rc, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if cfg.Workers < 1 {
		return fmt.Errorf("-max-concurrent-reconciles %d: want at least 1", cfg.Workers)
	}
	if cfg.LeaseNamespace == "" {
		cfg.LeaseNamespace = cfg.Namespace
	}
	sel, err := labels.Parse(cfg.Selector)
	if err != nil {
		return fmt.Errorf("-release-selector %q: %w", cfg.Selector, err)
	}
	if cfg.LeaseID == "" {
		cfg.LeaseID = leaseID(cfg.Selector)
	}
	opts := ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: cfg.MetricsAddr},
		HealthProbeBindAddress:        cfg.ProbeAddr,
		LeaderElection:                cfg.LeaderElect,
		LeaderElectionID:              cfg.LeaseID,
		LeaderElectionNamespace:       cfg.LeaseNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &cfg.LeaseDuration,
		RenewDeadline:                 &cfg.RenewDeadline,
		RetryPeriod:                   &cfg.RetryPeriod,
		Controller:                    config.Controller{MaxConcurrentReconciles: cfg.Workers},
		// Releases, Deployments and routes are read from the cache (the
		// gateway Router and the Setters answer a read older than their
		// own last write with that write, the reconciler reads its
		// Release from the API server only when the cache is behind).
		// Gateways and GatewayClasses are read only to check what a
		// mirror needs, by name: no cache (and no list or watch) for them.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&gwv1.Gateway{}, &gwv1.GatewayClass{}}}},
	}
	opts.Cache.ByObject = map[client.Object]cache.ByObject{}
	if cfg.Namespace != "" {
		opts.Cache.DefaultNamespaces = map[string]cache.Config{cfg.Namespace: {}}
		if cfg.PeerNamespaces != "" {
			// The peers' routes are listed from the cache too.
			nss := map[string]cache.Config{cfg.Namespace: {}}
			for _, ns := range strings.Split(cfg.PeerNamespaces, ",") {
				nss[ns] = cache.Config{}
			}
			opts.Cache.ByObject[&gwv1.HTTPRoute{}] = cache.ByObject{Namespaces: nss}
		}
	}
	if cfg.Selector != "" {
		// A shard: the cache holds only its Releases, so only they are
		// reconciled (the Deployments and routes are cached whole).
		opts.Cache.ByObject[&v1alpha1.Release{}] = cache.ByObject{Label: sel}
	}
	mgr, err := ctrl.NewManager(rc, opts)
	if err != nil {
		return err
	}
	r := &controller.Reconciler{
		Client:   mgr.GetClient(),
		Reader:   mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder(controller.Name),
		Metrics:  controller.NewMetrics(nil),

		HopEvents: cfg.HopEvents,
	}
	if cfg.Selector != "" {
		r.Selector = sel
	}
	switch {
	case cfg.PeerNamespaces != "":
		r.PeerNamespaces = strings.Split(cfg.PeerNamespaces, ",")
	case cfg.Namespace != "":
		r.PeerNamespaces = []string{cfg.Namespace}
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if cfg.ProbeAddr != "0" {
		if err := errors.Join(mgr.AddHealthzCheck("healthz", healthz.Ping), mgr.AddReadyzCheck("readyz", healthz.Ping)); err != nil {
			return err
		}
	}
	go func() {
		select {
		case <-mgr.Elected():
			ctrl.Log.Info("elected: this replica reconciles")
		case <-ctx.Done():
		}
	}()
	ctrl.Log.Info("starting", "namespace", cfg.Namespace, "releaseSelector", cfg.Selector, "leaderElection", cfg.LeaderElect, "lease", cfg.LeaseNamespace+"/"+cfg.LeaseID)
	return mgr.Start(ctx)
}

// leaseID is the default name of the leader election Lease: one per
// shard, so that each shard elects its own leader. The selector is hashed
// into the name (a Lease name is a DNS subdomain; a selector is not).
func leaseID(selector string) string {
	if selector == "" {
		return controller.Name
	}
	h := fnv.New32a()
	h.Write([]byte(selector))
	return fmt.Sprintf("%s-%08x", controller.Name, h.Sum32())
}
