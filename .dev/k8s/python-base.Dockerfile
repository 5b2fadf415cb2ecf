# The local stand-in for python:3.11-slim-bookworm (no registry can be reached here): Debian bookworm minbase
# (debootstrap, docker import) with Debian's Python 3.11 as a venv at /usr/local, so that python3, pip and
# site-packages are where the official image has them (/usr/local/bin, /usr/local/lib/python3.11/site-packages).
# The machine's own certificate authorities (ca-certificates/, from /usr/local/share/ca-certificates) come along:
# the machine reaches PyPI through them.
ARG DEBIAN
FROM ${DEBIAN}
ARG DEBIAN_FRONTEND=noninteractive
COPY ca-certificates/ /usr/local/share/ca-certificates/
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && update-ca-certificates \
    && python3.11 -m venv /usr/local \
    && PIP_CERT=/etc/ssl/certs/ca-certificates.crt /usr/local/bin/pip install --no-cache-dir --upgrade pip \
    && /usr/local/bin/python --version
ENV LANG=C.UTF-8 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
CMD ["python3"]
