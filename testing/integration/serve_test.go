package integration

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestServeSmoke runs `tandem serve` with only --listen (so that it does
// not need port 9092) in an empty working directory: the data lands in
// ./tandem-data, /healthz and /metrics answer on the default HTTP address,
// SIGTERM exits 0 within seconds, and a restart keeps the data.
func TestServeSmoke(t *testing.T) {
	bin := tandemtest.BuildBinary(t)
	const defaultHTTP = "127.0.0.1:9644"
	if ln, err := net.Listen("tcp", defaultHTTP); err != nil {
		t.Fatalf("the default HTTP address %s is taken by another process, so `tandem serve` cannot use its default: %v", defaultHTTP, err)
	} else {
		ln.Close()
	}
	cwd := t.TempDir()
	const topic = "smoke"
	var want []string

	for run := range 2 {
		cmd, kafkaAddr, httpAddr := startServe(t, bin, cwd)
		if httpAddr != defaultHTTP {
			t.Fatalf("HTTP on %s, want the default %s", httpAddr, defaultHTTP)
		}
		if fi, err := os.Stat(filepath.Join(cwd, "tandem-data")); err != nil || !fi.IsDir() {
			t.Fatalf("./tandem-data in the working directory: %v", err)
		}
		if code, body := httpGet(t, "http://"+httpAddr+"/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
			t.Fatalf("/healthz: %d %q", code, body)
		}

		if run == 0 {
			tandemtest.CreateTopic(t, kafkaAddr, topic, 1)
			cl := tandemtest.Client(t, kafkaAddr, kgo.DefaultProduceTopic(topic))
			for i := range 10 {
				v := "smoke-" + string(rune('a'+i))
				if err := cl.ProduceSync(context.Background(), kgo.StringRecord(v)).FirstErr(); err != nil {
					t.Fatal(err)
				}
				want = append(want, v)
			}
			cl.Close()
		}
		var got []string
		consumeAll(t, kafkaAddr, topic, len(want), func(r *kgo.Record) { got = append(got, string(r.Value)) })
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("run %d: read %q, want %q", run, got, want)
		}

		code, body := httpGet(t, "http://"+httpAddr+"/metrics")
		if code != 200 || !strings.Contains(body, "process_resident_memory_bytes") {
			t.Fatalf("/metrics: %d, no process metrics:\n%.2000s", code, body)
		}
		if !hasBrokerMetric(body) {
			t.Fatalf("/metrics has no broker metric (only process_ and go_ ones):\n%.3000s", body)
		}

		start := time.Now()
		cmd.Process.Signal(syscall.SIGTERM)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("run %d: exit after SIGTERM: %v", run, err)
			}
			t.Logf("run %d: exited 0 %v after SIGTERM", run, time.Since(start).Round(time.Millisecond))
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("run %d: still running 10s after SIGTERM", run)
		}
	}
}

var servingLine = regexp.MustCompile(`msg="tandem serving".* kafka=(\S+).* http=(\S+)`)

// startServe runs `tandem serve --listen 127.0.0.1:0` in cwd and returns
// once it logs the addresses it serves on.
func startServe(t *testing.T, bin, cwd string) (cmd *exec.Cmd, kafkaAddr, httpAddr string) {
	t.Helper()
	cmd = exec.Command(bin, "serve", "--listen", "127.0.0.1:0")
	cmd.Dir = cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	found := make(chan []string, 1)
	var log strings.Builder
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1:]
			}
		}
	}()
	select {
	case m := <-found:
		return cmd, m[0], m[1]
	case <-logDone:
		t.Fatalf("tandem serve exited before serving:\n%s", log.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("tandem serve did not log %q in 60s", "tandem serving")
	}
	return nil, "", ""
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// hasBrokerMetric reports whether a Prometheus text body holds a sample
// that is not one of the process-wide process_* and go_* metrics.
func hasBrokerMetric(body string) bool {
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' || strings.HasPrefix(line, "process_") || strings.HasPrefix(line, "go_") {
			continue
		}
		return true
	}
	return false
}

// TestServeConfigFile checks that --config and --set reach the broker:
// node.id from the file, num.partitions from --set over the file's value.
func TestServeConfigFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "server.properties")
	props := "# Kafka style\nnode.id=5\nnum.partitions=2\nauto.create.topics.enable=true\n"
	if err := os.WriteFile(file, []byte(props), 0o644); err != nil {
		t.Fatal(err)
	}
	p := tandemtest.StartProcess(t, t.TempDir(), "--config", file, "--set", "num.partitions=3")
	req := kmsg.NewPtrMetadataRequest()
	req.Version, req.AllowAutoTopicCreation = 9, true
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("auto")
	req.Topics = append(req.Topics, rt)
	resp, err := tandemtest.Dial(t, p.Addr).Request(req)
	if err != nil {
		t.Fatal(err)
	}
	mr := resp.(*kmsg.MetadataResponse)
	if len(mr.Brokers) != 1 || mr.Brokers[0].NodeID != 5 {
		t.Fatalf("brokers %+v, want node 5 from the config file", mr.Brokers)
	}
	if len(mr.Topics) != 1 || mr.Topics[0].ErrorCode != 0 || len(mr.Topics[0].Partitions) != 3 {
		t.Fatalf("auto-created topic: %+v, want 3 partitions (--set over the file)", mr.Topics)
	}
	for _, part := range mr.Topics[0].Partitions {
		if part.Leader != 5 {
			t.Fatalf("partition %d led by %d, want 5", part.Partition, part.Leader)
		}
	}
}
