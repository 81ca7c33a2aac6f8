// Command etcd is etcd's server built from go.etcd.io/etcd/server/v3, the
// module Kubernetes pins, for the local control plane of tests and demos.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
