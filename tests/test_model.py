import torch

from workload.model import ConvNet


def test_output_shape_and_parameter_count():
    model = ConvNet()
    assert model(torch.zeros(7, 1, 28, 28)).shape == (7, 10)
    # conv1 416 + bn1 32 + conv2 12 832 + bn2 64 + fc 15 690: the tutorial network's 29 034.
    assert sum(p.numel() for p in model.parameters()) == 29_034


def test_layers_are_the_tutorial_network():
    model = ConvNet()
    conv1, bn1, _, pool1 = model.layer1
    conv2, bn2, _, pool2 = model.layer2
    assert (conv1.in_channels, conv1.out_channels, conv1.kernel_size, conv1.padding) == (1, 16, (5, 5), (2, 2))
    assert (conv2.in_channels, conv2.out_channels, conv2.kernel_size, conv2.padding) == (16, 32, (5, 5), (2, 2))
    assert (bn1.num_features, bn2.num_features) == (16, 32)
    assert pool1.kernel_size == pool2.kernel_size == 2
    assert (model.fc.in_features, model.fc.out_features) == (1568, 10)
