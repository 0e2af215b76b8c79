package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

const chromiumPath = "/usr/bin/chromium"

// chromium runs Debian's headless Chromium on url with a fresh profile
// and the flags that keep it off every network but loopback, and returns
// what it printed on stdout. args say what to do (--dump-dom,
// --screenshot=FILE).
func chromium(t *testing.T, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	profile := t.TempDir()
	argv := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + profile, "--window-size=1360,1000",
		// Virtual time stops while requests are pending: the page has
		// fetched and drawn its data once this much has passed.
		"--virtual-time-budget=4000"}, args...)
	cmd := exec.CommandContext(ctx, chromiumPath, append(argv, url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// startMirroringProcess starts a destination broker, the built binary
// with its HTTP address, that mirrors topics of src as mirror name.
func startMirroringProcess(t *testing.T, src *mirrorCluster, name string, topics ...string) (*tandemtest.Proc, *admin.Client) {
	t.Helper()
	dst := tandemtest.StartProcess(t, t.TempDir(), "--set", "mirror.topic.num.partitions=4",
		"--set", "offsets.topic.num.partitions=4", "--set", "replica.fetch.wait.max.ms=200")
	adm := admin.New(tandemtest.Client(t, dst.Addr, admin.Opt()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := adm.CreateMirror(ctx, name, map[string]string{"bootstrap.servers": src.addr()}); err != nil {
		t.Fatal(err)
	}
	add := map[string]string{}
	for _, topic := range topics {
		add[topic] = name
	}
	if err := adm.AddTopicsToMirror(ctx, add); err != nil {
		t.Fatal(err)
	}
	return dst, adm
}

// consoleRow is a partition row of the mirrors page.
var consoleRow = regexp.MustCompile(`<tr data-partition="([^"]+)" data-state="([^"]+)" data-lag="(-?\d+)">`)

// mirrorRows reads the mirrors page as Chromium draws it: partition →
// state and lag, of the card of mirror name.
func mirrorRows(dom, name string) map[string][2]string {
	card := strings.Index(dom, fmt.Sprintf(`data-mirror="%s"`, name))
	if card < 0 {
		return nil
	}
	rows := map[string][2]string{}
	for _, m := range consoleRow.FindAllStringSubmatch(dom[card:], -1) {
		rows[m[1]] = [2]string{m[2], m[3]}
	}
	return rows
}

// TestConsoleMirrorsPage opens the console of a destination broker (the
// built binary) in headless Chromium, as an operator would: the mirrors
// page shows the mirror, its source, each partition MIRRORING with lag 0
// once caught up and an RPO of 0; after a pause it shows PAUSED. A
// screenshot of the page goes to the test's temp dir (TANDEM_SCREENSHOT
// names a file to copy it to, as docs/console-mirrors.png was made).
func TestConsoleMirrorsPage(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("TANDEM_REQUIRE_CHROMIUM") != "" {
			t.Fatalf("no headless browser: %s is missing, and TANDEM_REQUIRE_CHROMIUM is set", chromiumPath)
		}
		t.Skipf("no headless browser: %s is missing (apt-get install chromium); .ci/run installs it", chromiumPath)
	}
	src := startMirrorCluster(t, "")
	createMirrorTopic(t, src, "orders", 3)
	createMirrorTopic(t, src, "payments", 2)
	produceN(t, src.addr(), "orders", 3, 200)
	produceN(t, src.addr(), "payments", 2, 50)

	dst, adm := startMirroringProcess(t, src, "dr-east", "orders", "payments")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	url := "http://" + dst.HTTPAddr + "/#mirrors"
	want := []string{"orders/0", "orders/1", "orders/2", "payments/0", "payments/1"}
	// Each phase waits for the broker first (DescribeMirrors), then for
	// the page: a browser start costs seconds on a loaded machine.
	phase := func(what string, describe func(map[string]mirrorproto.PartitionDetail) bool, page func(rows map[string][2]string, dom string) bool) string {
		t.Helper()
		waitFor(t, 90*time.Second, what+" (DescribeMirrors)", func() bool {
			st, _ := states(t, adm, "dr-east")
			return len(st) == len(want) && describe(st)
		})
		var dom string
		waitFor(t, 90*time.Second, what+" (the mirrors page)", func() bool {
			dom = chromium(t, url, "--dump-dom")
			rows := mirrorRows(dom, "dr-east")
			return len(rows) == len(want) && page(rows, dom)
		})
		return dom
	}
	every := func(st map[string]mirrorproto.PartitionDetail, ok func(mirrorproto.PartitionDetail) bool) bool {
		for _, p := range st {
			if !ok(p) {
				return false
			}
		}
		return true
	}

	dom := phase("every partition MIRRORING with lag 0", func(st map[string]mirrorproto.PartitionDetail) bool {
		return every(st, func(p mirrorproto.PartitionDetail) bool { return p.State == "MIRRORING" && p.Lag == 0 })
	}, func(rows map[string][2]string, _ string) bool {
		for _, p := range want {
			if rows[p] != [2]string{"MIRRORING", "0"} {
				return false
			}
		}
		return true
	})
	for _, s := range []string{`data-page="mirrors"`, src.addr(), `data-rpo-ms="0"`, `data-rpo-records="0"`, "Divergence manifest", "<svg"} {
		if !strings.Contains(dom, s) {
			t.Errorf("the mirrors page lacks %q", s)
		}
	}

	shot := filepath.Join(t.TempDir(), "mirrors.png")
	chromium(t, url, "--screenshot="+shot, "--hide-scrollbars")
	png, err := os.ReadFile(shot)
	if err != nil || len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot %s: %v (%d bytes)", shot, err, len(png))
	}
	if out := os.Getenv("TANDEM_SCREENSHOT"); out != "" {
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Pausing is the CLI's; the page shows it, and the lag a paused
	// mirror builds up while the source goes on: what a failover would
	// lose now.
	if err := adm.PauseMirror(ctx, "dr-east"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "PAUSED (DescribeMirrors)", func() bool {
		st, _ := states(t, adm, "dr-east")
		return every(st, func(p mirrorproto.PartitionDetail) bool { return p.State == "PAUSED" })
	})
	produceN(t, src.addr(), "payments", 2, 30)
	phase("PAUSED with the lag built up since", func(st map[string]mirrorproto.PartitionDetail) bool {
		return st["payments/0"].Lag == 30 && st["payments/1"].Lag == 30
	}, func(rows map[string][2]string, dom string) bool {
		for _, p := range want {
			if rows[p][0] != "PAUSED" {
				return false
			}
		}
		return rows["payments/0"][1] == "30" && rows["payments/1"][1] == "30" && strings.Contains(dom, `data-rpo-records="60"`)
	})
}
