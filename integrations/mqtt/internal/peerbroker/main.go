// Command peerbroker runs the same mochi-mqtt server as kdb-mqtt
// (internal/brokerconf) with one of mochi's own storage hooks, for the
// benchmark and the kill -9 loss measurement (bench_test.go, loss_test.go).
//
//	peerbroker -hook pebble|bolt -store DIR [-sync] [-listen ADDR]
//
// -sync selects the hook's durable setting: pebble's Mode "Sync" (its
// default is NoSync); bolt has none other than its default (every bbolt
// transaction is fsynced), so -sync changes nothing for it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kdb-project/kdb/integrations/mqtt/internal/brokerconf"
	"github.com/mochi-mqtt/server/v2/hooks/storage/bolt"
	"github.com/mochi-mqtt/server/v2/hooks/storage/pebble"
	"go.etcd.io/bbolt"
)

func main() {
	hook := flag.String("hook", "pebble", "pebble or bolt")
	store := flag.String("store", "", "store directory")
	sync := flag.Bool("sync", false, "the hook's durable setting")
	listen := flag.String("listen", "127.0.0.1:1883", "MQTT TCP listen address")
	flag.Parse()
	if err := run(*hook, *store, *listen, *sync); err != nil {
		fmt.Fprintln(os.Stderr, "peerbroker:", err)
		os.Exit(1)
	}
}

func run(hook, store, listen string, sync bool) error {
	if store == "" {
		return fmt.Errorf("-store is required")
	}
	if err := os.MkdirAll(store, 0o750); err != nil {
		return err
	}
	log := brokerconf.Logger()
	srv, err := brokerconf.NewServer(log)
	if err != nil {
		return err
	}
	var timed *brokerconf.LoadTimer
	start := time.Now() // serve_time holds the hook's Init, as store_read_time does
	switch hook {
	case "pebble":
		mode := pebble.NoSync
		if sync {
			mode = pebble.Sync
		}
		timed = &brokerconf.LoadTimer{Hook: new(pebble.Hook)}
		err = srv.AddHook(timed, &pebble.Options{Path: filepath.Join(store, "pebble"), Mode: mode})
	case "bolt":
		timed = &brokerconf.LoadTimer{Hook: new(bolt.Hook)}
		err = srv.AddHook(timed, &bolt.Options{Path: filepath.Join(store, "bolt.db"), Options: &bbolt.Options{Timeout: 250e6}})
	default:
		return fmt.Errorf("unknown hook %q", hook)
	}
	if err != nil {
		return fmt.Errorf("%s hook: %w", hook, err)
	}
	l, err := brokerconf.Listen(srv, listen)
	if err != nil {
		return err
	}
	sigs := brokerconf.Signals()
	if err := srv.Serve(); err != nil {
		return err
	}
	log.Info("peerbroker: listening", "address", l.Address(), "hook", hook, "sync", sync,
		"store_read_time", timed.Took(), "serve_time", time.Since(start))
	<-sigs
	_ = srv.Close()
	log.Info("peerbroker: stopped")
	return nil
}
