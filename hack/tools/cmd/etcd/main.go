// Command etcd is etcd's server entry point, built from go.etcd.io/etcd/server/v3
// so that pkg/testenv needs nothing beyond the Go module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
