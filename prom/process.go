package prom

import (
	"bytes"
	"io"

	"github.com/VictoriaMetrics/metrics"
)

// ProcessFamilies are the Go runtime and process families that
// WriteProcessMetrics writes: the ones Prometheus' own Go client exports
// under the same names, which dashboards for Go programs read.
var ProcessFamilies = []Family{
	{Name: "go_gc_cpu_seconds_total", Type: Counter, Help: "CPU time spent on garbage collection, in seconds."},
	{Name: "go_gc_duration_seconds", Type: Summary, Help: "Stop-the-world pause durations of garbage collections, in seconds."},
	{Name: "go_gc_pauses_seconds", Type: Histogram, Help: "Distribution of stop-the-world garbage collection pauses, in seconds (buckets only)."},
	{Name: "go_gomaxprocs", Type: Gauge, Help: "GOMAXPROCS: OS threads that may run Go code at once."},
	{Name: "go_goroutines", Type: Gauge, Help: "Goroutines that currently exist."},
	{Name: "go_info", Type: Gauge, Help: "The Go version the binary was built with, as label version; always 1."},
	{Name: "go_memlimit_bytes", Type: Gauge, Help: "The Go runtime's soft memory limit (GOMEMLIMIT), in bytes."},
	{Name: "go_memstats_alloc_bytes", Type: Gauge, Help: "Bytes of heap objects allocated and not yet freed."},
	{Name: "go_memstats_alloc_bytes_total", Type: Counter, Help: "Bytes allocated for heap objects, freed or not."},
	{Name: "go_memstats_heap_idle_bytes", Type: Gauge, Help: "Bytes in heap spans that hold no object."},
	{Name: "go_memstats_heap_inuse_bytes", Type: Gauge, Help: "Bytes in heap spans that hold at least one object."},
	{Name: "go_memstats_heap_objects", Type: Gauge, Help: "Heap objects allocated and not yet freed."},
	{Name: "go_memstats_heap_released_bytes", Type: Gauge, Help: "Bytes of heap memory returned to the operating system."},
	{Name: "go_memstats_last_gc_time_seconds", Type: Gauge, Help: "When the last garbage collection ended, in seconds since the Unix epoch."},
	{Name: "go_memstats_next_gc_bytes", Type: Gauge, Help: "Heap size at which the next garbage collection starts, in bytes."},
	{Name: "go_memstats_sys_bytes", Type: Gauge, Help: "Bytes of memory the Go runtime obtained from the operating system."},
	{Name: "go_sched_latencies_seconds", Type: Histogram, Help: "Distribution of the time goroutines waited to run after becoming runnable, in seconds (buckets only)."},
	{Name: "go_threads", Type: Gauge, Help: "OS threads the Go runtime created."},
	{Name: "process_cpu_seconds_total", Type: Counter, Help: "User and system CPU time the process used, in seconds."},
	{Name: "process_io_storage_read_bytes_total", Type: Counter, Help: "Bytes the process read from storage devices."},
	{Name: "process_io_storage_written_bytes_total", Type: Counter, Help: "Bytes the process caused to be written to storage devices."},
	{Name: "process_max_fds", Type: Gauge, Help: "The limit of open file descriptors."},
	{Name: "process_open_fds", Type: Gauge, Help: "Open file descriptors (files, sockets)."},
	{Name: "process_resident_memory_bytes", Type: Gauge, Help: "Resident set size, in bytes."},
	{Name: "process_resident_memory_peak_bytes", Type: Gauge, Help: "Peak resident set size (VmHWM), in bytes."},
	{Name: "process_start_time_seconds", Type: Gauge, Help: "When the process started, in seconds since the Unix epoch."},
	{Name: "process_virtual_memory_bytes", Type: Gauge, Help: "Virtual memory size, in bytes."},
}

var processFamilies = func() map[string]Family {
	m := map[string]Family{}
	for _, f := range ProcessFamilies {
		m[f.Name] = f
	}
	return m
}()

// WriteProcessMetrics writes the families of ProcessFamilies, for the
// process that serves /metrics (an embedding program may export its own).
// The other families VictoriaMetrics computes are left out, so that every
// family written is documented.
func WriteProcessMetrics(w io.Writer) {
	var buf bytes.Buffer
	metrics.WriteProcessMetrics(&buf)
	metrics.WriteFDMetrics(&buf)
	write(w, buf.Bytes(), func(name string) (Family, bool) {
		f, ok := processFamilies[name]
		return f, ok
	}, false)
}
