// The release tools: the push of the release's images (go-containerregistry's
// remote package) and the kubectl plugin's krew archives and manifest. A
// module of its own, so that the registry client's dependencies (the docker
// credential helpers go-containerregistry's keychain reads) never enter the
// main module's go.mod.
module github.com/headroom-k8s/headroom/hack/tools/release

go 1.26.0

require (
	github.com/google/go-containerregistry v0.21.4
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/containerd/stargz-snapshotter/estargz v0.18.2 // indirect
	github.com/docker/cli v29.3.1+incompatible // indirect
	github.com/docker/docker-credential-helpers v0.9.3 // indirect
	github.com/klauspost/compress v1.18.5 // indirect
	github.com/mitchellh/go-homedir v1.1.0 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	github.com/vbatts/tar-split v0.12.2 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/sync v0.20.0 // indirect
	golang.org/x/sys v0.42.0 // indirect
	gotest.tools/v3 v3.5.2 // indirect
)
