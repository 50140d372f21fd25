"""Test control plane: a real etcd + kube-apiserver built from Go modules (see README.md)."""
