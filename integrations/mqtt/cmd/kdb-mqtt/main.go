// Command kdb-mqtt is an MQTT v5 (and 3.1.1) broker: mochi-mqtt with its
// storage on a kdb store (package kdbmqtt).
//
//	kdb-mqtt -store DIR [-listen 127.0.0.1:1883] [-metrics 127.0.0.1:9100] [-cpuprofile FILE]
//
// At start it logs the store's recovery report (free-list path, records
// replayed, time) and, when it listens, store_read_time (the store's Open,
// its recovery, and the hook's reading of the store: its Init, which
// reads the inflight messages and pending publishes, and its Stored*
// calls) and serve_time (from the Open to listening, which also holds
// mochi's loading); with
// -metrics it serves the store's Stats in the Prometheus text format at
// /metrics. SIGINT or SIGTERM stops it cleanly:
// the connections are closed, the hook's commits waited for, and the
// store closed (a final checkpoint). A store another process holds stops
// it at start with ErrLocked in the message. It exits 1 if a store write
// failed while it served (the hook then refused every acknowledgement that
// depends on a write), even if the stop itself went well.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"time"

	"github.com/kdb-project/kdb"
	kdbmqtt "github.com/kdb-project/kdb/integrations/mqtt"
	"github.com/kdb-project/kdb/integrations/mqtt/internal/brokerconf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	store := flag.String("store", "", "the kdb store's directory (created if missing)")
	listen := flag.String("listen", "127.0.0.1:1883", "MQTT TCP listen address")
	metrics := flag.String("metrics", "", "serve Prometheus metrics at http://ADDR/metrics (off if empty)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile (pprof) to FILE from start to the clean stop")
	flag.Parse()
	if *store == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: kdb-mqtt -store DIR [-listen 127.0.0.1:1883] [-metrics 127.0.0.1:9100] [-cpuprofile FILE]")
		os.Exit(2)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "kdb-mqtt: cpuprofile:", err)
			os.Exit(1)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if err := run(*store, *listen, *metrics); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "kdb-mqtt:", err)
		os.Exit(1)
	}
}

func run(dir, listen, metricsAddr string) error {
	log := brokerconf.Logger()
	// store_read_time and serve_time count the store's Open (its
	// recovery), as the peers' count their database's open (in their
	// hook's Init): the restart comparison weighs the same work.
	start := time.Now()
	db, err := kdb.Open(dir, &kdb.Options{Logger: log.With("component", "kdb")})
	opened := time.Since(start)
	if err != nil {
		if errors.Is(err, kdb.ErrLocked) {
			return fmt.Errorf("open store %s: %w (ErrLocked: another kdb-mqtt, or another process, holds this store)", dir, err)
		}
		return fmt.Errorf("open store %s: %w", dir, err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = db.Close()
		}
	}()
	logRecovery(log, dir, db.Recovery())

	srv, err := brokerconf.NewServer(log)
	if err != nil {
		return err
	}
	hook := new(kdbmqtt.Hook)
	timed := &brokerconf.LoadTimer{Hook: hook}
	if err := srv.AddHook(timed, &kdbmqtt.Options{DB: db, Server: srv}); err != nil {
		return fmt.Errorf("storage hook: %w", err)
	}
	l, err := brokerconf.Listen(srv, listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", listen, err)
	}
	var msrv *http.Server
	if metricsAddr != "" {
		ln, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			return fmt.Errorf("metrics listen %s: %w", metricsAddr, err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(newCollector(db, hook), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		msrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = msrv.Serve(ln) }()
		log.Info("kdb-mqtt: metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	}
	sigs := brokerconf.Signals()
	if err := srv.Serve(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	// store_read_time: the store's Open and the hook's reading of the
	// stored state (its Init and Stored* calls); serve_time: from the
	// Open to listening (the Open, the hook's Init and all of Serve),
	// which also holds the server's own loading.
	log.Info("kdb-mqtt: listening", "address", l.Address(), "store", dir, "skipped_records", hook.Skipped(),
		"store_read_time", opened+timed.Took(), "serve_time", time.Since(start))

	sig := <-sigs
	log.Info("kdb-mqtt: stopping", "signal", sig.String())
	if msrv != nil {
		_ = msrv.Close()
	}
	closed = true
	if err := shutdown(srv, hook, db); err != nil {
		return err
	}
	log.Info("kdb-mqtt: stopped")
	return nil
}

// shutdown closes the server (its connections; then the hook's Stop waits
// for its commits) and the store, and returns every failure: the server's
// Close, a store write that failed while serving (hook.Err: mochi's Close
// only logs what the hook's Stop returns), the store's Close.
func shutdown(srv interface{ Close() error }, hook interface{ Err() error }, db interface{ Close() error }) error {
	var errs []error
	if err := srv.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close server: %w", err))
	}
	if err := hook.Err(); err != nil {
		errs = append(errs, fmt.Errorf("a store write failed while serving (acknowledgements were refused since): %w", err))
	}
	if err := db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close store: %w", err))
	}
	return errors.Join(errs...)
}

func logRecovery(log *slog.Logger, dir string, r kdb.RecoveryReport) {
	log.Info("kdb-mqtt: store recovered",
		"store", dir,
		"free_list_path", r.FreeListPath,
		"free_list_reason", r.Reason,
		"pages_scanned", r.PagesScanned,
		"records_replayed", r.RecordsReplayed,
		"bytes_replayed", r.BytesReplayed,
		"torn_bytes_truncated", r.TornBytesTruncated,
		"redo_applied", r.RedoApplied,
		"replay_time", r.ReplayTime,
		"total_time", r.TotalTime,
	)
}
