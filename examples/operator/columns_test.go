package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/strategy"
)

// TestPrinterColumns: what kubectl get shows of an idle, a paused
// mid-rollout and a finished Release, read as kubectl reads it, the Table
// the API server renders from the CRD's printer columns: each side's
// revision and weight (all traffic on side B once finished, not the
// canary weight 0), the phase also when idle, the step (a pause without
// end), Released, and the message only with -o wide (priority 1).
func TestPrinterColumns(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.start("operator")
	canary := v1alpha1.ReleaseStrategy{Canary: &strategy.Canary{
		MaxSurgePercent: 25,
		Steps:           []strategy.CanaryStep{strategy.SetWeight(25), strategy.PauseUntilResumed(), strategy.SetWeight(100)},
		Options:         strategy.Options{PollInterval: metav1.Duration{Duration: time.Second}}}}
	create(t, w.c, w.release("v1", canary))
	rel := w.waitFor("v1 released", 30*time.Second, released)
	columns, cells := w.table(t)
	wantColumns := []string{"Name", "Revision", "Phase", "Step", "A", "A-Weight", "B", "B-Weight", "Released", "Age", "Message(wide)"}
	if d := cmp.Diff(wantColumns, columns); d != "" {
		t.Errorf("columns (-want +got):\n%s", d)
	}
	check := func(what string, cells map[string]string, want map[string]string) {
		t.Helper()
		if want["Message(wide)"] == "" {
			t.Errorf("%s: no status.message", what)
		}
		got := map[string]string{}
		for name := range want {
			got[name] = cells[name]
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: cells (-want +got):\n%s", what, d)
		}
	}
	check("idle", cells, map[string]string{"Name": "web", "Revision": "v1", "Phase": "Idle", "Step": "",
		"A": id("v1"), "A-Weight": "100", "B": "", "B-Weight": "0", "Released": "True", "Message(wide)": rel.Status.Message})

	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Revision = "v2" })
	rel = w.waitFor("the pause step at 25", 30*time.Second, func(rel *v1alpha1.Release) bool {
		s := &rel.Status.Rollout
		return rel.Status.ObservedGeneration == rel.Generation && s.Phase == strategy.PhasePaused && s.Observed.Weight == 25
	})
	_, cells = w.table(t)
	check("paused at the pause step", cells, map[string]string{"Revision": "v2", "Phase": "Paused", "Step": "2/3 pause until resumed",
		"A": id("v1"), "A-Weight": "75", "B": id("v2"), "B-Weight": "25", "Released": "False", "Message(wide)": rel.Status.Message})

	w.edit(func(s *v1alpha1.ReleaseSpec) { s.Control.Resume = "r1" })
	rel = w.waitFor("v2 released", 60*time.Second, released)
	_, cells = w.table(t)
	check("finished", cells, map[string]string{"Revision": "v2", "Phase": "Succeeded", "Step": "",
		"A": id("v1"), "A-Weight": "0", "B": id("v2"), "B-Weight": "100", "Released": "True", "Message(wide)": rel.Status.Message})
}

// table returns the printer columns of the Release, as "Name" for a
// column of priority 0 and "Name(wide)" for one that only -o wide shows,
// and the cells of its row by column, as the API server renders them for
// kubectl get (Accept: application/json;as=Table;g=meta.k8s.io;v=v1).
func (w *world) table(t *testing.T) ([]string, map[string]string) {
	t.Helper()
	hc, err := rest.HTTPClientFor(w.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/apis/%s/namespaces/%s/releases/web", strings.TrimSuffix(w.env.Config.Host, "/"), v1alpha1.GroupVersion, w.ns)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;g=meta.k8s.io;v=v1")
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s as a Table: %s: %s", url, res.Status, raw)
	}
	var tbl metav1.Table
	if err := json.Unmarshal(raw, &tbl); err != nil {
		t.Fatalf("GET %s as a Table: %v: %s", url, err, raw)
	}
	if len(tbl.Rows) != 1 || len(tbl.Rows[0].Cells) != len(tbl.ColumnDefinitions) {
		t.Fatalf("want one row of %d cells, got %s", len(tbl.ColumnDefinitions), raw)
	}
	var columns []string
	cells := map[string]string{}
	for i, c := range tbl.ColumnDefinitions {
		name := c.Name
		if c.Priority > 0 {
			name += "(wide)"
		}
		columns = append(columns, name)
		if v := tbl.Rows[0].Cells[i]; v != nil {
			cells[name] = fmt.Sprint(v)
		}
	}
	return columns, cells
}
