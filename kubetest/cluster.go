package kubetest

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/upshift-dev/upshift/internal/osthread"
)

// Annotations that steer the simulated kubelet (kwok) for one pod. Set them
// on a pod, or on a pod template so that every pod made from it has them.
// kwok acts on them when they are present at the pod's step they concern:
// annotating a running pod with AnnotationFault crash-loop makes it crash
// once it is ready.
const (
	// AnnotationReadyAfter is how long the pod's containers run before
	// the pod becomes Ready, as a Go duration ("1.5s"); without it,
	// [ClusterOptions.PodReadyDelay].
	AnnotationReadyAfter = "kubetest.upshift.dev/ready-after"
	// AnnotationFault makes the pod fail: [FaultNeverReady] or
	// [FaultCrashLoop].
	AnnotationFault = "kubetest.upshift.dev/fault"
	// AnnotationCrashAfter is how long a crash-looping pod stays Ready
	// before it crashes (default 1s).
	AnnotationCrashAfter = "kubetest.upshift.dev/crash-after"
	// AnnotationRestartAfter is how long a crashed container waits in
	// CrashLoopBackOff before it runs again (default 2s).
	AnnotationRestartAfter = "kubetest.upshift.dev/restart-after"
)

// Values of [AnnotationFault].
const (
	// FaultNeverReady: the containers run, the pod is never Ready.
	FaultNeverReady = "never-ready"
	// FaultCrashLoop: the pod becomes Ready, crashes after
	// AnnotationCrashAfter (Ready false, the container waiting in
	// CrashLoopBackOff, restartCount one more), runs again after
	// AnnotationRestartAfter, becomes Ready again after
	// AnnotationReadyAfter, and so on.
	FaultCrashLoop = "crash-loop"
)

// NodeLabel is the label every simulated node has, with the node's name as
// its value.
const NodeLabel = "kubetest.upshift.dev/node"

// ClusterOptions make [Env] a whole cluster: besides kube-apiserver and etcd,
// the real kube-controller-manager (the Deployment, ReplicaSet, garbage
// collector, namespace, node lifecycle, taint eviction and pod garbage
// collector controllers) and kube-scheduler of [KubeVersion], and simulated
// nodes whose kubelet is kwok: each pod is scheduled by the scheduler,
// starts, and becomes Ready after a delay, without a container ever running.
// Pod IPs come from 127.0.0.0/8 and nothing ever connects to them.
//
// The zero value is usable; every field has a default.
type ClusterOptions struct {
	// Nodes is how many simulated nodes register (default 3), named
	// kwok-node-0, kwok-node-1, ... Each is played by a kwok process of
	// its own, so that [Cluster.LoseNode] can stop one.
	Nodes int
	// PodReadyDelay is how long a pod's containers run before it becomes
	// Ready, unless the pod says otherwise with [AnnotationReadyAfter]
	// (default 200ms).
	PodReadyDelay time.Duration
	// NodeGracePeriod is how long after its last heartbeat the node
	// lifecycle controller marks a node NotReady and its pods not ready
	// (kube-controller-manager --node-monitor-grace-period; default 12s,
	// real clusters 50s).
	NodeGracePeriod time.Duration
	// EvictAfter is how long pods tolerate a NotReady or unreachable node
	// before they are evicted (the API server's
	// --default-not-ready-toleration-seconds and
	// --default-unreachable-toleration-seconds; default 5s, real clusters
	// 300s). Whole seconds.
	EvictAfter time.Duration
}

func (o ClusterOptions) withDefaults() ClusterOptions {
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.PodReadyDelay <= 0 {
		o.PodReadyDelay = 200 * time.Millisecond
	}
	if o.NodeGracePeriod <= 0 {
		o.NodeGracePeriod = 12 * time.Second
	}
	if o.EvictAfter < time.Second {
		o.EvictAfter = 5 * time.Second
	}
	return o
}

// clusterBinaries are the binaries a cluster needs besides kube-apiserver
// and etcd.
var clusterBinaries = []string{"kube-controller-manager", "kube-scheduler", "kwok"}

//go:embed stages.yaml
var stagesTemplate string

// Cluster is the part of a whole-cluster [Env] beyond the API server: the
// controller manager, the scheduler and the simulated nodes, which tests
// can stop and start to make the faults of a real cluster. Get it from
// [Env.Cluster]. Safe for concurrent use, but a test that stops a component
// changes the cluster for every test of the package: such tests must not
// run in parallel with tests that need the component.
type Cluster struct {
	// Nodes names the simulated nodes.
	Nodes []string
	// Options are the options the cluster runs with, defaults filled in.
	Options ClusterOptions
	// LogDir holds each component's log (kube-controller-manager.log,
	// kube-scheduler.log, kwok-<node>.log); it is removed when the
	// control plane stops.
	LogDir string

	dir        string // binaries
	kubeconfig string
	stages     string
	thread     *osthread.Thread // starts every process: see osthread

	mu    sync.Mutex
	procs map[string]*proc
}

// proc is one running component.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startCluster starts the components around a running API server.
func startCluster(env *Env, dir string, o ClusterOptions) (*Cluster, error) {
	tmp, err := os.MkdirTemp("", "upshift-kubetest-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		Options:    o,
		LogDir:     tmp,
		dir:        dir,
		kubeconfig: filepath.Join(tmp, "kubeconfig"),
		stages:     filepath.Join(tmp, "stages.yaml"),
		thread:     osthread.New(),
		procs:      map[string]*proc{},
	}
	stages := strings.ReplaceAll(stagesTemplate, "__READY_MS__", strconv.FormatInt(o.PodReadyDelay.Milliseconds(), 10))
	if err := os.WriteFile(c.kubeconfig, env.KubeConfig, 0o600); err != nil {
		c.stop()
		return nil, err
	}
	if err := os.WriteFile(c.stages, []byte(stages), 0o600); err != nil {
		c.stop()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for i := 0; i < o.Nodes; i++ {
		name := fmt.Sprintf("kwok-node-%d", i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{NodeLabel: name, "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
		}}
		if _, err := env.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			c.stop()
			return nil, fmt.Errorf("kubetest: creating node %s: %w", name, err)
		}
		c.Nodes = append(c.Nodes, name)
	}
	starts := []func() error{c.startScheduler, c.startControllerManager}
	for _, n := range c.Nodes {
		starts = append(starts, func() error { return c.startNode(n) })
	}
	for _, start := range starts {
		if err := start(); err != nil {
			c.stop()
			return nil, err
		}
	}
	if err := c.waitNodesReady(ctx, env); err != nil {
		c.stop()
		return nil, err
	}
	if err := c.probe(ctx, env); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// startNode starts the kwok process that plays node's kubelet. Each node
// has its own loopback ranges: node i is 127.1.i.1 and its pods 127.2.i.0/24
// (kwok hands out addresses; nothing listens on them).
func (c *Cluster) startNode(node string) error {
	i := c.nodeIndex(node)
	if i < 0 {
		return fmt.Errorf("kubetest: no node %q (nodes: %v)", node, c.Nodes)
	}
	leaseSeconds := int(c.Options.NodeGracePeriod / time.Second / 2)
	if leaseSeconds < 1 {
		leaseSeconds = 1
	}
	return c.start("kwok-"+node, "kwok",
		"--kubeconfig="+c.kubeconfig,
		"--config="+c.stages,
		"--manage-single-node="+node,
		fmt.Sprintf("--node-ip=127.1.%d.1", i%256),
		fmt.Sprintf("--cidr=127.2.%d.0/24", i%256),
		"--node-port=0",
		"--server-address=",
		"--node-lease-duration-seconds="+strconv.Itoa(leaseSeconds),
	)
}

func (c *Cluster) startScheduler() error {
	return c.start("kube-scheduler", "kube-scheduler",
		"--kubeconfig="+c.kubeconfig,
		"--authentication-kubeconfig="+c.kubeconfig,
		"--authorization-kubeconfig="+c.kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"-v=1",
	)
}

func (c *Cluster) startControllerManager() error {
	return c.start("kube-controller-manager", "kube-controller-manager",
		"--kubeconfig="+c.kubeconfig,
		"--authentication-kubeconfig="+c.kubeconfig,
		"--authorization-kubeconfig="+c.kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=deployment-controller,replicaset-controller,garbage-collector-controller,namespace-controller,node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller",
		"--node-monitor-period=1s",
		"--node-monitor-grace-period="+c.Options.NodeGracePeriod.String(),
		"--node-startup-grace-period="+c.Options.NodeGracePeriod.String(),
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--concurrent-deployment-syncs=10",
		"--concurrent-replicaset-syncs=10",
		"--use-service-account-credentials=false",
		"-v=1",
	)
}

// start runs binary as the component name, its output in LogDir/name.log.
func (c *Cluster) start(name, binary string, args ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.procs[name]; p != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("kubetest: %s is already running", name)
		}
	}
	log, err := os.OpenFile(filepath.Join(c.LogDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(c.dir, binary), args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = c.LogDir
	// kwok reads ~/.kwok/kwok.yaml when it exists: never the user's.
	cmd.Env = append(os.Environ(), "HOME="+c.LogDir)
	cmd.SysProcAttr = procAttr()
	c.thread.Run(func() { err = cmd.Start() })
	if err != nil {
		_ = log.Close()
		return fmt.Errorf("kubetest: starting %s: %w", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = log.Close()
		close(p.done)
	}()
	c.procs[name] = p
	return nil
}

// halt stops the component name (SIGTERM, then SIGKILL after stopTimeout)
// and waits until it has exited. A component that is not running is fine.
func (c *Cluster) halt(name string) error {
	c.mu.Lock()
	p := c.procs[name]
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("kubetest: %s did not stop within %v of SIGTERM; killed", name, stopTimeout)
	}
}

// stop stops every component and removes LogDir.
func (c *Cluster) stop() error {
	c.mu.Lock()
	names := make([]string, 0, len(c.procs))
	for n := range c.procs {
		names = append(names, n)
	}
	c.mu.Unlock()
	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, n := range names {
		wg.Go(func() {
			if err := c.halt(n); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		})
	}
	wg.Wait()
	c.thread.Close()
	_ = os.RemoveAll(c.LogDir)
	return errors.Join(errs...)
}

func (c *Cluster) nodeIndex(node string) int {
	for i, n := range c.Nodes {
		if n == node {
			return i
		}
	}
	return -1
}

// StopControllerManager stops kube-controller-manager and waits until it
// has exited: from then on nothing updates Deployment or ReplicaSet status,
// creates or deletes pods for them, collects garbage or watches nodes,
// until [Cluster.StartControllerManager].
func (c *Cluster) StopControllerManager(tb TB) {
	tb.Helper()
	if err := c.halt("kube-controller-manager"); err != nil {
		tb.Fatalf("%v", err)
	}
}

// StartControllerManager starts kube-controller-manager again after
// [Cluster.StopControllerManager]. Like a restarted one in a real cluster,
// it lists everything afresh and catches up.
func (c *Cluster) StartControllerManager(tb TB) {
	tb.Helper()
	if err := c.startControllerManager(); err != nil {
		tb.Fatalf("%v", err)
	}
}

// LoseNode stops the kwok process of node, as if its kubelet died or the
// node dropped off the network: its lease is no longer renewed and its pods'
// status no longer changes. After [ClusterOptions.NodeGracePeriod] the node
// lifecycle controller marks the node NotReady and its pods not ready;
// after [ClusterOptions.EvictAfter] more, its pods are evicted (they stay
// Terminating, for nothing confirms that they stopped) and their
// ReplicaSets replace them on the other nodes.
func (c *Cluster) LoseNode(tb TB, node string) {
	tb.Helper()
	if c.nodeIndex(node) < 0 {
		tb.Fatalf("kubetest: no node %q (nodes: %v)", node, c.Nodes)
		return
	}
	if err := c.halt("kwok-" + node); err != nil {
		tb.Fatalf("%v", err)
	}
}

// RestoreNode starts the kwok process of a node lost by [Cluster.LoseNode]
// again: the node renews its lease and becomes Ready, and the pods still
// bound to it (the Terminating ones included) are played again.
func (c *Cluster) RestoreNode(tb TB, node string) {
	tb.Helper()
	if err := c.startNode(node); err != nil {
		tb.Fatalf("%v", err)
	}
}

// waitNodesReady waits until every node is Ready.
func (c *Cluster) waitNodesReady(ctx context.Context, env *Env) error {
	var last string
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, n := range c.Nodes {
			node, err := env.Kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			if !nodeReady(node) {
				last = n + " is not Ready"
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("kubetest: simulated nodes not ready (%s): %w%s", last, err, c.tails())
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// probe runs one Deployment to its end, through every component: the
// Deployment and ReplicaSet controllers create a pod, the scheduler binds
// it, kwok makes it ready, and the garbage collector deletes the
// ReplicaSet and the pod with the Deployment.
func (c *Cluster) probe(ctx context.Context, env *Env) error {
	const ns = "kubetest-probe"
	if _, err := env.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubetest: probe namespace: %w", err)
	}
	one := int32(1)
	labels := map[string]string{"app": "probe"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "probe.invalid/app:1"}}},
			},
		},
	}
	if _, err := env.Kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kubetest: probe Deployment: %w", err)
	}
	var last string
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, "probe", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("status %+v", got.Status)
		return got.Status.ObservedGeneration == got.Generation && got.Status.AvailableReplicas == 1, nil
	})
	if err != nil {
		return fmt.Errorf("kubetest: a one-pod Deployment did not become available (%s): %w%s", last, err, c.tails())
	}
	fg := metav1.DeletePropagationForeground
	if err := env.Kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		return fmt.Errorf("kubetest: deleting the probe namespace: %w", err)
	}
	return nil
}

// tails returns the end of every component's log, for an error message.
func (c *Cluster) tails() string {
	var b strings.Builder
	entries, _ := os.ReadDir(c.LogDir)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(c.LogDir, e.Name()))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "\n--- %s (last %d lines)\n%s", e.Name(), len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}
