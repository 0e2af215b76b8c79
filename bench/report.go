package bench

import (
	"fmt"
	"html"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tandem-kafka/tandem/bench/limits"
)

// Machine describes where the figures were measured.
type Machine struct {
	NumCPU    int
	CPUModel  string
	MemTotal  string
	Kernel    string
	GoVersion string
}

func readMachine() Machine {
	m := Machine{NumCPU: runtime.NumCPU(), GoVersion: runtime.Version()}
	scanProcFile("/proc/cpuinfo", "model name", func(v string) { m.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":")) })
	scanProcFile("/proc/meminfo", "MemTotal:", func(v string) { m.MemTotal = strings.TrimSpace(v) })
	if k, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(k))
	}
	return m
}

// table is rows of cells, rendered as aligned text or Markdown.
type table struct {
	head []string
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) text(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.head, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

func (t *table) markdown(w io.Writer) {
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(t.head, " | "), strings.Repeat(" --- |", len(t.head)))
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
}

func mb(bps float64) string { return fmt.Sprintf("%.1f", bps/1e6) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/1e6) }

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func (rep *Report) resultsTable() *table {
	t := &table{head: []string{"target", "workload", "MB/s median (min-max)", "records/s", "e2e ms p50/p99/p999 @ offered rec/s", "broker CPU s/GB", "broker peak RSS MiB", "disk bytes/byte", "read/expected"}}
	for _, r := range rep.Results {
		if r.Workload.Kind == MirrorScale || r.Workload.Kind == MirrorCatchUp {
			continue // no throughput of their own: their tables
		}
		if r.Err != "" {
			msg := r.Err
			if len(msg) > 120 {
				msg = msg[:120] + "…"
			}
			t.add(r.Target, r.Workload.Name(), "FAILED: "+strings.ReplaceAll(msg, "|", "/"), "", "", "", "", "", "")
			continue
		}
		if r.Skip != "" {
			t.add(r.Target, r.Workload.Name(), "-", "-", "-", "-", "-", "-", "-")
			continue
		}
		lat, cpu, rss, disk, read := "-", "-", "-", "-", "-"
		if l := r.Latency; l != nil {
			lat = fmt.Sprintf("%s/%s/%s @ %.0f", ms(l.P50), ms(l.P99), ms(l.P999), l.OfferedRecsPerSec)
		}
		if r.HasProc {
			cpu, rss = fmt.Sprintf("%.2f", r.CPUSecPerGB), fmt.Sprintf("%d", r.PeakRSS>>20)
			if r.Workload.Kind != Consume {
				disk = fmt.Sprintf("%.2f", r.DiskPerByte)
			}
		}
		if r.Workload.Kind != Produce {
			read = fmt.Sprintf("%d/%d", r.Consumed, r.Expected)
		}
		t.add(r.Target, r.Workload.Name(),
			fmt.Sprintf("%s (%s-%s)", mb(r.MBps.Median), mb(r.MBps.Min), mb(r.MBps.Max)),
			fmt.Sprintf("%.0f", r.RecsPerSec.Median), lat, cpu, rss, disk, read)
	}
	return t
}

// comparable reports whether there are Tandem results and something to
// compare them with.
func (rep *Report) comparable() bool {
	var tandem, kfake bool
	for _, r := range rep.Results {
		if r.Skip != "" || r.Workload.Kind.mirrors() {
			continue
		}
		tandem = tandem || r.Target == "tandem"
		kfake = kfake || r.Target == "kfake"
	}
	return tandem && (kfake || rep.Limits != nil)
}

// relativeTable sets each Tandem figure against kfake's and the limits.
func (rep *Report) relativeTable() *table {
	t := &table{head: []string{"workload", "Tandem/kfake MB/s", "kfake/Tandem e2e p99", "Tandem/kfake CPU per GB", "/ loopback TCP", "/ file append", "/ file append+fdatasync", "/ Pebble 1 KiB Sync"}}
	kf := map[string]Result{}
	for _, r := range rep.Results {
		if r.Target == "kfake" && r.Err == "" {
			kf[r.Workload.Name()] = r
		}
	}
	l := rep.Limits
	if l == nil {
		l = &limits.Limits{}
	}
	for _, r := range rep.Results {
		if r.Target != "tandem" || r.Err != "" || r.Workload.Kind.mirrors() {
			continue
		}
		k, ok := kf[r.Workload.Name()]
		vsK, lat, cpu := "-", "-", "-"
		if ok {
			vsK = ratio(r.MBps.Median, k.MBps.Median)
			cpu = ratio(r.CPUSecPerGB, k.CPUSecPerGB)
			if r.Latency != nil && k.Latency != nil {
				lat = ratio(float64(k.Latency.P99), float64(r.Latency.P99))
			}
		}
		v := r.MBps.Median
		t.add(r.Workload.Name(), vsK, lat, cpu, ratio(v, l.LoopbackTCP), ratio(v, l.FileAppend), ratio(v, l.FileAppendSync), ratio(v, l.PebbleAppend))
	}
	return t
}

func (rep *Report) limitsTable() *table {
	t := &table{head: []string{"limit", "MB/s"}}
	if l := rep.Limits; l != nil {
		t.add("loopback TCP (1 writer, 1 reader, 1 MiB writes)", mb(l.LoopbackTCP))
		t.add("file append, 1 MiB writes", mb(l.FileAppend))
		t.add("file append, fdatasync every 1 MiB", mb(l.FileAppendSync))
		t.add("Pebble batch append, 1 KiB values, 64 MiB memtable, grouped Sync commits", mb(l.PebbleAppend))
		t.add("mirror pipe: a cached file sent over loopback TCP (sendfile), CRC-32C, file append, fdatasync every 8 MiB", mb(l.MirrorPipe))
	}
	return t
}

// WriteText prints the tables for a terminal.
func (rep *Report) WriteText(w io.Writer) {
	if rt := rep.resultsTable(); len(rt.rows) > 0 {
		rt.text(w)
	}
	if mt := rep.mirrorTable(); len(mt.rows) > 0 {
		fmt.Fprintln(w)
		mt.text(w)
	}
	for _, mt := range rep.mirrorTables() {
		if len(mt.t.rows) > 0 {
			fmt.Fprintf(w, "\n%s\n", mt.title)
			mt.t.text(w)
		}
	}
	if rep.Limits != nil {
		fmt.Fprintln(w)
		rep.limitsTable().text(w)
	}
	if rep.comparable() {
		fmt.Fprintln(w)
		rep.relativeTable().text(w)
	}
	if rep.Restart != nil {
		fmt.Fprintln(w)
		rep.restartTable().text(w)
	}
	if rep.Cluster != nil {
		t, f := rep.clusterTables()
		fmt.Fprintln(w)
		t.text(w)
		fmt.Fprintln(w)
		f.text(w)
	}
	fmt.Fprintf(w, "\n%d CPUs (%s), %s, %s, %s; took %v\n", rep.Machine.NumCPU, rep.Machine.CPUModel,
		rep.Machine.MemTotal, rep.Machine.Kernel, rep.Machine.GoVersion, rep.Duration.Round(time.Second))
}

// WriteMarkdown writes the report as a Markdown document. svgName, if not
// empty, is linked as the plot.
func (rep *Report) WriteMarkdown(w io.Writer, svgName string) {
	m := rep.Machine
	fmt.Fprintf(w, "# Benchmarks\n\nMeasured %s in %v.\n\n", rep.Started.UTC().Format("2006-01-02 15:04 MST"), rep.Duration.Round(time.Second))
	fmt.Fprintf(w, "Command: `%s`\n\n", rep.Command)
	fmt.Fprintf(w, "Machine: %d CPUs, %s; memory %s; %s; %s.\n\n", m.NumCPU, m.CPUModel, m.MemTotal, m.Kernel, m.GoVersion)
	if len(rep.Results) > 0 {
		w0 := rep.Results[0].Workload
		fmt.Fprintf(w, "Each workload: %d runs of %v, payload seed %d.\n\n", w0.Runs, w0.Duration, w0.Seed)
	}
	fmt.Fprintf(w, "The load client is franz-go (kgo) in the harness process; each workload runs against a fresh broker in a child process, "+
		"whose CPU (utime+stime), peak RSS (VmHWM) and write_bytes come from /proc; disk bytes/byte divides write_bytes by the "+
		"uncompressed value bytes produced. MB/s counts record value bytes (10^6 per MB): for produce, those acknowledged from "+
		"the first send to the end of the final flush; for consume, a pre-filled backlog of %d MiB read from offset 0 by a new "+
		"client each run; the median of the runs, with min and max. End-to-end latency is measured from a send timestamp in each "+
		"record, at the same offered load on every broker: 50%% of the lowest median rate of the matching produce workload.\n\n", rep.Backlog>>20)
	fmt.Fprint(w, "Clients: kgo producers with 1 ms linger, batches up to 1 MiB, 32 MiB buffered, the default sticky partitioner; "+
		"acks=all is idempotent (kgo's default), acks=1 is not and keeps up to 5 requests in flight. Consumers read partitions "+
		"directly (no group) with FetchMaxBytes 50 MiB and 10 MiB per partition. Values are seeded pseudo-random printable "+
		"bytes (about 6 bits of entropy per byte), led by a send timestamp and a sequence number.\n\n")
	switch {
	case rep.Against != "":
		fmt.Fprintf(w, "Broker: the one running at %s (no process figures).\n\n", rep.Against)
	case rep.Sync:
		fmt.Fprint(w, "Durability: both brokers fsync before acknowledging (Tandem tandem.log.sync=true; kfake with DataDir and SyncWrites).\n\n")
	default:
		fmt.Fprint(w, "Durability: no fsync before acknowledging (Tandem tandem.log.sync=false; kfake with DataDir, without SyncWrites).\n\n")
	}
	if rt := rep.resultsTable(); len(rt.rows) > 0 {
		fmt.Fprintln(w, "## Results")
		fmt.Fprintln(w)
		rt.markdown(w)
	}
	if mt := rep.mirrorTable(); len(mt.rows) > 0 {
		fmt.Fprintln(w, "\n## Mirror")
		fmt.Fprintln(w)
		fmt.Fprint(w, "A source and a destination Tandem, each in a child process; the destination mirrors a topic of the source "+
			"(plugins/mirror) while the source gets a steady offered load (50% of the median rate of the matching produce workload, "+
			"or --mirror-rate; mirror-unthrottled: as fast as the source acknowledges; mirror-rtt: --mirror-rtt-mbps across a round "+
			"trip). Mirrored records/s: the destination's growth from the start of the load until it ends where the source "+
			"does. Produced/offered: what the source acknowledged against what was offered (the mirror cannot carry more). "+
			"Lag in records: source minus destination high watermarks, summed over partitions, sampled every 20 ms under the "+
			"load. Mirror lag in ms, from the same samples: how long ago the source's high watermark first passed where the "+
			"destination's is (0 when the destination has what the source has), rounded up to the sample before, so at most 20 ms "+
			"over. E2e lag in ms: from each record's send timestamp to its read by a consumer of the destination, so it also holds "+
			"the producer's wait for the source and the consumer's fetch; beside it, the e2e workload's latency in the same run "+
			"(produce and consume on one broker at half the produce maximum, no mirror), when it ran. Mirrored/produced: "+
			"records on the destination at the end against records acknowledged on the source; after each run both sides' records "+
			"are compared by a digest of each partition (offsets, timestamps, keys, values). The broker figures of "+
			"the results table are the destination's, per value byte mirrored.\n\n")
		mt.markdown(w)
	}
	for _, mt := range rep.mirrorTables() {
		if len(mt.t.rows) > 0 {
			fmt.Fprintf(w, "\n## %s\n\n%s\n\n", mt.title, mt.about)
			mt.t.markdown(w)
		}
	}
	if rep.Limits != nil {
		fmt.Fprintln(w, "\n## Limits of this machine")
		fmt.Fprintln(w)
		rep.limitsTable().markdown(w)
	}
	if rep.comparable() {
		fmt.Fprintln(w, "\n## Tandem relative to kfake and to the limits")
		fmt.Fprintln(w)
		rep.relativeTable().markdown(w)
	}
	if rep.Restart != nil {
		fmt.Fprintln(w, "\n## Restart after kill -9")
		fmt.Fprintln(w)
		fmt.Fprint(w, "A Tandem broker filled with 1 KiB records on 6 partitions, then killed with SIGKILL while a producer "+
			"writes; restarted on the same data directory: the time until its listener serves, and until a produce is "+
			"acknowledged (from the process's start).\n\n")
		rep.restartTable().markdown(w)
	}
	if rep.Cluster != nil {
		t, f := rep.clusterTables()
		fmt.Fprintln(w, "\n## Replication")
		fmt.Fprintln(w)
		fmt.Fprint(w, "Produce with acks=all (idempotent) to a topic of replication factor 1 on one standalone Tandem, then of "+
			"replication factor 3 on three Tandem brokers forming one cluster (each a child process, every one a voter), in the same run. "+
			"Catch-up: one of the three stops cleanly, the given bytes of records are produced to a replicated topic, and the broker "+
			"restarts: the time from its serving again until it is back in the ISR of every partition. Failover: the leader of a "+
			"single-partition topic of replication factor 3 is killed with SIGKILL; the time from the kill until a producer that "+
			"already knew the old leader has a record acknowledged with acks=all by the new one (default broker.session.timeout.ms; "+
			"a killed broker's closed connection fences it at once). The broker is restarted and back in the ISR before the next kill.\n\n")
		t.markdown(w)
		fmt.Fprintln(w)
		f.markdown(w)
	}
	if svgName != "" {
		fmt.Fprintf(w, "\n![throughput and latency](%s)\n", svgName)
	}
}

// WriteSVG plots the median MB/s (with min-max whiskers) of every result
// and the latency percentiles of the end-to-end results.
func (rep *Report) WriteSVG(w io.Writer) {
	const (
		labelW, barW, rowH, pad = 330, 520, 18, 20
		width                   = labelW + barW + 2*pad + 60
	)
	colors := map[string]string{"tandem": "#2b6cb0", "kfake": "#dd6b20"}
	color := func(target string) string {
		if c, ok := colors[target]; ok {
			return c
		}
		return "#718096"
	}
	var ok, lats []Result
	maxMB := 0.0
	for _, r := range rep.Results {
		if r.Err != "" || r.Skip != "" || r.Scale != nil || r.CatchUp != nil {
			continue
		}
		ok = append(ok, r)
		maxMB = max(maxMB, r.MBps.Max)
		if r.Latency != nil {
			lats = append(lats, r)
		}
	}
	maxLat := time.Duration(0)
	for _, r := range lats {
		maxLat = max(maxLat, r.Latency.P999)
	}
	h1 := 50 + len(ok)*rowH
	h2 := 0
	if len(lats) > 0 {
		h2 = 60 + len(lats)*3*rowH
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, h1+h2+pad)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="14" font-weight="bold">Throughput, MB/s (median, min-max)</text>`+"\n", pad, pad+10)
	scale := func(v, maxV float64) float64 {
		if maxV <= 0 {
			return 0
		}
		return v / maxV * barW
	}
	for i, r := range ok {
		y := 40 + i*rowH
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s %s</text>`+"\n", pad+labelW-6, y+12, html.EscapeString(r.Target), r.Workload.Name())
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", pad+labelW, y+2, scale(r.MBps.Median, maxMB), rowH-4, color(r.Target))
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="black"/>`+"\n", float64(pad+labelW)+scale(r.MBps.Min, maxMB), float64(pad+labelW)+scale(r.MBps.Max, maxMB), y+rowH/2, y+rowH/2)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(pad+labelW)+scale(r.MBps.Max, maxMB)+4, y+12, mb(r.MBps.Median))
	}
	if len(lats) > 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="14" font-weight="bold">End-to-end latency, ms (p50, p99, p999)</text>`+"\n", pad, h1+20)
		for i, r := range lats {
			for j, q := range []struct {
				name string
				d    time.Duration
			}{{"p50", r.Latency.P50}, {"p99", r.Latency.P99}, {"p999", r.Latency.P999}} {
				y := h1 + 40 + (i*3+j)*rowH
				label := q.name
				if j == 0 {
					label = html.EscapeString(r.Target) + " " + r.Workload.Name() + " " + q.name
				}
				fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", pad+labelW-6, y+12, label)
				fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="%.2f"/>`+"\n", pad+labelW, y+2, scale(float64(q.d), float64(maxLat)), rowH-4, color(r.Target), 1-0.3*float64(j))
				fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(pad+labelW)+scale(float64(q.d), float64(maxLat))+4, y+12, ms(q.d))
			}
		}
	}
	b.WriteString("</svg>\n")
	io.WriteString(w, b.String())
}
