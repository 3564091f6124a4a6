package kubetest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// checkBinaries names exactly the binaries missing for the kind of
// environment asked for: a bare API server needs two, a cluster five.
func TestCheckBinaries(t *testing.T) {
	all := []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok"}
	for _, tc := range []struct {
		name    string
		present []string
		cluster bool
		missing []string // nil: no error
	}{
		{"bare, all there", all[:2], false, nil},
		{"bare, no etcd", all[:1], false, []string{"etcd"}},
		{"cluster, all there", all, true, nil},
		{"cluster, only the API server", all[:2], true, []string{"kube-controller-manager", "kube-scheduler", "kwok"}},
		{"cluster, no kwok", all[:4], true, []string{"kwok"}},
		{"nothing", nil, true, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, b := range tc.present {
				if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			// A file that is not executable does not count.
			if err := os.WriteFile(filepath.Join(dir, "not-a-binary"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			err := checkBinaries(dir, tc.cluster)
			if tc.missing == nil {
				if err != nil {
					t.Fatalf("checkBinaries: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrNoBinaries) {
				t.Fatalf("checkBinaries = %v, want ErrNoBinaries", err)
			}
			for _, b := range all {
				want := false
				for _, m := range tc.missing {
					want = want || m == b
				}
				if got := strings.Contains(err.Error(), b+" ") || strings.Contains(err.Error(), b+"]"); got != want {
					t.Errorf("error names %s: %v, want %v: %v", b, got, want, err)
				}
			}
		})
	}
}

func TestClusterOptionsDefaults(t *testing.T) {
	for _, tc := range []struct {
		in, want ClusterOptions
	}{
		{ClusterOptions{}, ClusterOptions{Nodes: 3, PodReadyDelay: 200 * time.Millisecond, NodeGracePeriod: 12 * time.Second, EvictAfter: 5 * time.Second}},
		{ClusterOptions{Nodes: 1, PodReadyDelay: time.Second, NodeGracePeriod: 20 * time.Second, EvictAfter: 30 * time.Second},
			ClusterOptions{Nodes: 1, PodReadyDelay: time.Second, NodeGracePeriod: 20 * time.Second, EvictAfter: 30 * time.Second}},
		// Tolerations are whole seconds: less than one is the default.
		{ClusterOptions{Nodes: -1, EvictAfter: 500 * time.Millisecond}, ClusterOptions{Nodes: 3, PodReadyDelay: 200 * time.Millisecond, NodeGracePeriod: 12 * time.Second, EvictAfter: 5 * time.Second}},
	} {
		if diff := cmp.Diff(tc.want, tc.in.withDefaults()); diff != "" {
			t.Errorf("%+v.withDefaults() (-want +got):\n%s", tc.in, diff)
		}
	}
}

// The stages file kwok reads has its placeholder filled in.
func TestStagesTemplate(t *testing.T) {
	if !strings.Contains(stagesTemplate, "__READY_MS__") {
		t.Fatal("stages.yaml lost its __READY_MS__ placeholder")
	}
	for _, name := range []string{"kubetest-pod-start", "kubetest-pod-ready", "kubetest-pod-crash", "kubetest-pod-restart", "kubetest-pod-delete", "kubetest-node-initialize"} {
		if !strings.Contains(stagesTemplate, "name: "+name+"\n") {
			t.Errorf("stages.yaml has no stage %s", name)
		}
	}
	for _, a := range []string{AnnotationReadyAfter, AnnotationFault, AnnotationCrashAfter, AnnotationRestartAfter, FaultNeverReady, FaultCrashLoop} {
		if !strings.Contains(stagesTemplate, a) {
			t.Errorf("stages.yaml never mentions %q", a)
		}
	}
}
