package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

const zkServer = "/usr/share/zookeeper/bin/zkServer.sh"

// freeAddr is a 127.0.0.1 address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startDaemon runs a child process in its own process group and kills
// the group at the end of the test (zkServer.sh execs java; Burrow runs
// alone).
func startDaemon(t *testing.T, logPath string, name string, args ...string) {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "ZOO_LOG_DIR="+filepath.Dir(logPath))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck // gone already is fine
		cmd.Wait()                                      //nolint:errcheck // killed
		log.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", filepath.Base(name), out)
		}
	})
}

// TestBurrow (issue 41, item 12) runs Debian's Burrow 1.2.1, a consumer
// lag monitor, against a broker, with ZooKeeper (its own locking) on
// 127.0.0.1: its cluster module reads the partitions' offsets with
// ListOffsets v0 (sarama told the cluster is 0.10.0), its consumer module
// reads __consumer_offsets (a 2.0 profile: Fetch v2 would need the
// message format down-conversion Tandem does not do), and it reports the
// group's lag. It skips when burrow or zookeeperd is not installed.
func TestBurrow(t *testing.T) {
	tandemtest.Long(t) // Burrow and ZooKeeper processes: the full tier only
	// CI (.ci/run) sets TANDEM_REQUIRE_BURROW: there a missing Burrow
	// fails the test rather than skipping it.
	skip := t.Skip
	if os.Getenv("TANDEM_REQUIRE_BURROW") != "" {
		skip = t.Fatal
	}
	burrow, err := exec.LookPath("Burrow")
	if err != nil {
		skip("no Burrow (apt-get install burrow zookeeperd)")
	}
	if _, err := os.Stat(zkServer); err != nil {
		skip("no ZooKeeper (apt-get install zookeeperd)")
	}
	dir := t.TempDir()
	zk, httpAddr := freeAddr(t), freeAddr(t)
	zkHost, zkPort, _ := net.SplitHostPort(zk)
	zoo := fmt.Sprintf("tickTime=2000\ndataDir=%s\nclientPort=%s\nclientPortAddress=%s\nadmin.enableServer=false\n", filepath.Join(dir, "zk"), zkPort, zkHost)
	if err := os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(zoo), 0o600); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, filepath.Join(dir, "zookeeper.log"), zkServer, "start-foreground", filepath.Join(dir, "zoo.cfg"))
	waitFor(t, 30*time.Second, "ZooKeeper to serve", func() bool {
		// "srvr", the four-letter word ZooKeeper 3.8 answers by default,
		// says "Mode: standalone" once it serves sessions.
		c, err := net.DialTimeout("tcp", zk, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second)) //nolint:errcheck // a failed read says so
		c.Write([]byte("srvr"))                        //nolint:errcheck // as above
		out, _ := io.ReadAll(c)
		return strings.Contains(string(out), "Mode: ")
	})

	b := tandemtest.StartInProcess(t, map[string]string{"offsets.topic.num.partitions": "3"})
	createTopicOn(t, b.Addr(), "orders", 1)
	produceN(t, b.Addr(), "orders", 1, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	adm := kadm.NewClient(tandemtest.Client(t, b.Addr()))
	var commit kadm.Offsets
	commit.AddOffset("orders", 0, 10, -1)
	if err := adm.CommitAllOffsets(ctx, "billing", commit); err != nil {
		t.Fatalf("commit billing's offset: %v", err)
	}

	conf := burrowConfig(dir, zk, b.Addr(), httpAddr)
	if err := os.WriteFile(filepath.Join(dir, "burrow.toml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, filepath.Join(dir, "burrow.out"), burrow, "--config-dir", dir)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := os.ReadFile(filepath.Join(dir, "burrow.log"))
			t.Logf("burrow.log:\n%s", out)
		}
	})

	var last string
	waitFor(t, 60*time.Second, "Burrow to report group billing's lag", func() bool {
		code, body := httpGetMaybe("http://" + httpAddr + "/v3/kafka/local/consumer/billing/lag")
		last = body
		if code != 200 {
			return false
		}
		var r struct {
			Status struct {
				TotalLag   int64 `json:"totallag"`
				Partitions []struct {
					Topic      string `json:"topic"`
					CurrentLag int64  `json:"current_lag"`
				} `json:"partitions"`
			} `json:"status"`
		}
		return json.Unmarshal([]byte(body), &r) == nil && r.Status.TotalLag == 90 && len(r.Status.Partitions) == 1 && r.Status.Partitions[0].CurrentLag == 90
	})
	t.Logf("Burrow: %s", strings.TrimSpace(last))
}

// httpGetMaybe is an HTTP GET that reports a server not up yet as
// status 0 rather than failing the test.
func httpGetMaybe(url string) (int, string) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// burrowConfig is a burrow.toml in dir: ZooKeeper at zk, one cluster at
// broker whose offsets the cluster module lists as sarama does for a
// 0.10.0 cluster (ListOffsets v0) and whose __consumer_offsets the
// consumer module reads as for 2.0.0, the HTTP API at httpAddr.
func burrowConfig(dir, zk, broker, httpAddr string) string {
	return fmt.Sprintf(`[general]
pidfile=%q
[logging]
filename=%q
level="info"
[zookeeper]
servers=[%q]
timeout=6
root-path="/burrow"
[client-profile.old]
client-id="burrow-old"
kafka-version="0.10.0"
[client-profile.new]
client-id="burrow-new"
kafka-version="2.0.0"
[cluster.local]
class-name="kafka"
servers=[%q]
client-profile="old"
topic-refresh=5
offset-refresh=2
[consumer.local]
class-name="kafka"
cluster="local"
servers=[%q]
client-profile="new"
start-latest=false
[httpserver.default]
address=%q
[storage.default]
class-name="inmemory"
workers=2
intervals=10
expire-group=604800
min-distance=1
`, filepath.Join(dir, "burrow.pid"), filepath.Join(dir, "burrow.log"), zk, broker, broker, httpAddr)
}
