# The pod sandbox image of the local cluster (containerd's sandbox_image): .dev/k8s/pause, built by build.sh.
FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
