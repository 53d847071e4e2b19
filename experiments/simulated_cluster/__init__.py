"""How native ÷ Horovod moves across a link: a multi-node Ray cluster simulated on one host (network namespaces,
shaped links), one comparison per link rate, and the regime report."""
