#!/bin/sh
# Creates the namespace and registers taskfleet's search attributes once the server is healthy.
set -eu
ns=${DEFAULT_NAMESPACE:-default}
addr=${TEMPORAL_ADDRESS:-temporal:7233}
until temporal operator cluster health --address "$addr"; do sleep 2; done
temporal operator namespace describe -n "$ns" --address "$addr" \
  || temporal operator namespace create -n "$ns" --address "$addr"
for key in TaskfleetKind TaskfleetRepo; do
  temporal operator search-attribute create -n "$ns" --address "$addr" --name "$key" --type Keyword || true
done
